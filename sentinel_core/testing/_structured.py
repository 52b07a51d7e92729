"""A parser of Structured Field Values (RFC 9651) of type List, for tests.

It follows the RFC's parsing algorithms (§4.2) step by step: a List of Items and Inner
Lists, each with Parameters, whose Bare Items are Integers, Decimals, Strings, Tokens,
Byte Sequences, Booleans, Dates and Display Strings. Anything else is a `ValueError`
saying where the input stopped making sense. Values become plain Python ones: `int`,
`float`, `str` (Strings, Tokens and Display Strings alike), `bytes`, `bool`, and a
`datetime.datetime` in UTC for a Date.

It is a test helper, not on any request path: clarity over speed.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import string
from dataclasses import dataclass, field

BareItem = int | float | str | bytes | bool | datetime.datetime
Parameters = dict[str, BareItem]

_DIGITS = frozenset(string.digits)
_ALPHA = frozenset(string.ascii_letters)
_LCALPHA = frozenset(string.ascii_lowercase)
_KEY_CHARS = _LCALPHA | _DIGITS | frozenset("_-.*")
_TCHAR = _ALPHA | _DIGITS | frozenset("!#$%&'*+-.^_`|~")
_TOKEN_CHARS = _TCHAR | frozenset(":/")
_BASE64 = _ALPHA | _DIGITS | frozenset("+/=")
_LOWER_HEX = frozenset("0123456789abcdef")
_OWS = " \t"


@dataclass(frozen=True, slots=True)
class Item:
    """A List member: a bare item, or an Inner List (a tuple of Items), and its parameters."""

    value: BareItem | tuple[Item, ...]
    parameters: Parameters = field(default_factory=dict)


def parse_list(text: str) -> list[Item]:
    """The members of a List field value (RFC 9651 §4.2, §4.2.1); ``""`` is the empty List.

    Raises:
        ValueError: ``text`` is not a valid List.
    """
    return _Parser(text.strip(" ")).parse_list()


class _Parser:
    """One field value being consumed from the left, as the RFC's algorithms do."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def fail(self, problem: str) -> ValueError:
        return ValueError(f"{problem} at position {self.at} of {self.text!r}")

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        self.at += 1
        return char

    def skip(self, chars: str) -> None:
        while self.peek() and self.peek() in chars:
            self.at += 1

    def parse_list(self) -> list[Item]:
        members: list[Item] = []
        while self.peek():
            members.append(self.parse_member())
            self.skip(_OWS)
            if not self.peek():
                return members
            if self.take() != ",":
                self.at -= 1
                raise self.fail("expected ',' between list members")
            self.skip(_OWS)
            if not self.peek():
                raise self.fail("a list ends with ','")
        return members

    def parse_member(self) -> Item:
        if self.peek() == "(":
            return self.parse_inner_list()
        return self.parse_item()

    def parse_inner_list(self) -> Item:
        self.take()  # "("
        items: list[Item] = []
        while self.peek():
            self.skip(" ")
            if self.peek() == ")":
                self.take()
                return Item(tuple(items), self.parse_parameters())
            items.append(self.parse_item())
            if self.peek() not in (" ", ")"):
                raise self.fail("expected ' ' or ')' in an inner list")
        raise self.fail("an inner list is not closed")

    def parse_item(self) -> Item:
        value = self.parse_bare_item()
        return Item(value, self.parse_parameters())

    def parse_parameters(self) -> Parameters:
        parameters: Parameters = {}
        while self.peek() == ";":
            self.take()
            self.skip(" ")
            key = self.parse_key()
            value: BareItem = True
            if self.peek() == "=":
                self.take()
                value = self.parse_bare_item()
            parameters[key] = value
        return parameters

    def parse_key(self) -> str:
        if self.peek() not in _LCALPHA and self.peek() != "*":
            raise self.fail("a key starts with a lowercase letter or '*'")
        start = self.at
        while self.peek() in _KEY_CHARS:
            self.at += 1
        return self.text[start : self.at]

    def parse_bare_item(self) -> BareItem:
        char = self.peek()
        if char == "-" or char in _DIGITS:
            return self.parse_number()
        if char == '"':
            return self.parse_string()
        if char == "*" or char in _ALPHA:
            return self.parse_token()
        if char == ":":
            return self.parse_byte_sequence()
        if char == "?":
            return self.parse_boolean()
        if char == "@":
            return self.parse_date()
        if char == "%":
            return self.parse_display_string()
        raise self.fail("expected an item")

    def parse_number(self) -> int | float:
        sign = -1 if self.peek() == "-" else 1
        if sign < 0:
            self.take()
        if self.peek() not in _DIGITS:
            raise self.fail("expected a digit")
        start = self.at
        decimal = False
        while self.peek():
            char = self.peek()
            if char in _DIGITS:
                self.at += 1
            elif char == "." and not decimal:
                if self.at - start > 12:
                    raise self.fail("a decimal has at most 12 integer digits")
                decimal = True
                self.at += 1
            else:
                break
            if self.at - start > (16 if decimal else 15):
                raise self.fail("too many digits")
        number = self.text[start : self.at]
        if not decimal:
            return sign * int(number)
        if number.endswith("."):
            raise self.fail("a decimal ends with '.'")
        if len(number.split(".")[1]) > 3:
            raise self.fail("a decimal has at most 3 fractional digits")
        return sign * float(number)

    def parse_string(self) -> str:
        self.take()  # '"'
        chars: list[str] = []
        while self.peek():
            char = self.take()
            if char == "\\":
                escaped = self.take()
                if escaped not in ('"', "\\"):
                    raise self.fail("only '\"' and '\\' may be escaped in a string")
                chars.append(escaped)
            elif char == '"':
                return "".join(chars)
            elif not " " <= char <= "~":
                raise self.fail("a string holds printable ASCII only")
            else:
                chars.append(char)
        raise self.fail("a string is not closed")

    def parse_token(self) -> str:
        start = self.at
        self.take()
        while self.peek() in _TOKEN_CHARS:
            self.at += 1
        return self.text[start : self.at]

    def parse_byte_sequence(self) -> bytes:
        self.take()  # ":"
        end = self.text.find(":", self.at)
        if end < 0:
            raise self.fail("a byte sequence is not closed")
        content = self.text[self.at : end]
        if not set(content) <= _BASE64:
            raise self.fail("a byte sequence holds base64 only")
        self.at = end + 1
        try:
            # Parsers should not fail for want of '=' padding (RFC 9651 §4.2.7).
            unpadded = content.rstrip("=")
            return base64.b64decode(unpadded + "=" * (-len(unpadded) % 4), validate=True)
        except binascii.Error:
            raise self.fail("not base64") from None

    def parse_boolean(self) -> bool:
        self.take()  # "?"
        char = self.take()
        if char not in ("0", "1"):
            raise self.fail("a boolean is ?0 or ?1")
        return char == "1"

    def parse_date(self) -> datetime.datetime:
        self.take()  # "@"
        seconds = self.parse_number()
        if isinstance(seconds, float):
            raise self.fail("a date is an integer")
        return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)

    def parse_display_string(self) -> str:
        self.take()  # "%"
        if self.take() != '"':
            raise self.fail("a display string starts with '%\"'")
        encoded = bytearray()
        while self.peek():
            char = self.take()
            if char == "%":
                digits = self.text[self.at : self.at + 2]
                if len(digits) != 2 or not set(digits) <= _LOWER_HEX:
                    raise self.fail("'%' in a display string is followed by two lowercase hex")
                self.at += 2
                encoded.append(int(digits, 16))
            elif char == '"':
                try:
                    return encoded.decode("utf-8")
                except UnicodeDecodeError:
                    raise self.fail("a display string is not UTF-8") from None
            elif not " " <= char <= "~":
                raise self.fail("a display string holds printable ASCII only")
            else:
                encoded.append(ord(char))
        raise self.fail("a display string is not closed")
