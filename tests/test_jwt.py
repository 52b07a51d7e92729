"""Tenant identity from bearer JWTs (SPEC §4): every bad token is a clean 401.

Each refusal is checked twice: on `JwtVerifier` (the `AuthError` and its RFC 6750 error
code) and through `Sentinel.guard` on the private Redis (a 401 with a ``Bearer``
challenge, and not one key written nor one script run: auth happens before Redis).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel_core import ConfigError, load_config
from sentinel_core.identity._jwt import MAX_TOKEN_LENGTH, AuthError, JwtVerifier
from sentinel_core.identity._keys import compact_hash
from tests.support.http import header, make_sentinel, request_view, script_calls
from tests.support.redis_server import RedisServer
from tests.support.tokens import (
    HS_SECRET,
    OTHER_HS_SECRET,
    bearer,
    claims,
    ec_private_key,
    forge_alg_none,
    forge_hmac,
    hs256,
    mint,
    public_pem,
    rsa_private_key,
)

ENDPOINT = "api.read"
POLICY = {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}


def config(redis_url: str = "memory://", **jwt: Any) -> dict[str, Any]:
    """One tenant policy; ``jwt`` entries override the HS256 defaults (None removes one)."""
    section = {"algorithms": ["HS256"], "key": HS_SECRET, **jwt}
    section = {name: value for name, value in section.items() if value is not None}
    return {"redis_url": redis_url, "jwt": section, "policies": {ENDPOINT: POLICY}}


def verifier(**jwt: Any) -> JwtVerifier:
    loaded = load_config(config(**jwt)).jwt
    assert loaded is not None
    return JwtVerifier(loaded)


def refusal(verify: JwtVerifier, authorization: str | None) -> AuthError:
    with pytest.raises(AuthError) as caught:
        verify.tenant_from_authorization(authorization)
    return caught.value


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


_HS256_HEADER = _b64(b'{"alg":"HS256"}')


def _tampered() -> str:
    token = hs256()
    middle = len(token) - 10
    return token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1 :]


def _cut_payload() -> str:
    head, payload, signature = hs256().split(".")
    return f"{head}.{payload[:-4]}.{signature}"


def _two_segments() -> str:
    return hs256().rsplit(".", 1)[0]


# (id, Authorization header value, RFC 6750 error code, words of the description)
BAD_HEADERS: list[tuple[str, Any, str | None, str]] = [
    ("missing header", lambda: None, None, "required"),
    ("empty header", lambda: "", None, "required"),
    ("blank header", lambda: "   ", None, "required"),
    ("basic scheme", lambda: "Basic dXNlcjpwYXNzd29yZA==", None, "required"),
    ("token scheme", lambda: f"Token {hs256()}", None, "required"),
    ("no scheme", lambda: hs256(), None, "required"),
    ("bearer without token", lambda: "Bearer", "invalid_request", "expected"),
    ("bearer with blank token", lambda: "Bearer    ", "invalid_request", "expected"),
    ("two tokens", lambda: f"Bearer {hs256()} {hs256()}", "invalid_request", "expected"),
    ("not b64token", lambda: "Bearer a,b", "invalid_request", "expected"),
    ("garbage", lambda: "Bearer garbage", "invalid_token", "malformed"),
    ("garbage with dots", lambda: "Bearer not.a.jwt", "invalid_token", "malformed"),
    ("truncated", lambda: bearer(hs256()[:-6]), "invalid_token", ""),
    ("truncated at a dot", lambda: bearer(hs256().rsplit(".", 1)[0] + "."), "invalid_token", ""),
    ("tampered signature", lambda: bearer(_tampered()), "invalid_token", "signature"),
    ("payload truncated", lambda: bearer(_cut_payload()), "invalid_token", ""),
    ("two segments", lambda: bearer(_two_segments()), "invalid_token", "malformed"),
    (
        "header not an object",
        lambda: bearer(f"{_b64(b'[1]')}.{_b64(b'{}')}.c2ln"),
        "invalid_token",
        "malformed",
    ),
    (
        "payload not json",
        lambda: bearer(f"{_HS256_HEADER}.{_b64(b'nope')}.c2ln"),
        "invalid_token",
        "",
    ),
    (
        "deeply nested header",
        lambda: bearer(f"{_b64(b'[' * 2900 + b']' * 2900)}.e30.c2ln"),
        "invalid_token",
        "malformed",
    ),
    ("too long", lambda: bearer("a" * MAX_TOKEN_LENGTH + ".b.c"), "invalid_token", "malformed"),
    ("expired", lambda: bearer(hs256(ttl=-60)), "invalid_token", "expired"),
    ("not yet valid", lambda: bearer(hs256(nbf=int(time.time()) + 600)), "invalid_token", "yet"),
    (
        "issued in the future",
        lambda: bearer(hs256(iat=int(time.time()) + 600)),
        "invalid_token",
        "yet",
    ),
    (
        "wrong signature",
        lambda: bearer(mint(claims(), OTHER_HS_SECRET)),
        "invalid_token",
        "signature",
    ),
    ("alg none", lambda: bearer(forge_alg_none(claims())), "invalid_token", "algorithm"),
    (
        "alg not allowlisted",
        lambda: bearer(mint(claims(), HS_SECRET, "HS512")),
        "invalid_token",
        "algorithm",
    ),
    ("missing sub", lambda: bearer(hs256(sub=None)), "invalid_token", "sub"),
    ("empty sub", lambda: bearer(hs256(sub="")), "invalid_token", "sub"),
    ("numeric sub", lambda: bearer(mint({**claims(), "sub": 42})), "invalid_token", ""),
    ("missing exp", lambda: bearer(mint({"sub": "tenant-a"})), "invalid_token", "exp"),
    ("exp not a number", lambda: bearer(mint({**claims(), "exp": "soon"})), "invalid_token", ""),
    ("exp infinite", lambda: bearer(mint({**claims(), "exp": 1e400})), "invalid_token", ""),
]


@pytest.mark.parametrize(
    ("authorization", "error", "words"),
    [pytest.param(value, error, words, id=name) for name, value, error, words in BAD_HEADERS],
)
def test_bad_authorization_is_an_auth_error_with_its_rfc6750_code(
    authorization: Any, error: str | None, words: str
) -> None:
    failure = refusal(verifier(), authorization())
    assert failure.error == error
    assert words in failure.description


def test_a_good_token_yields_its_sub() -> None:
    assert verifier().tenant_from_authorization(bearer(hs256("acme"))) == "acme"
    assert verifier().tenant_from_authorization(f"bearer   {hs256('acme')}  ") == "acme"


def test_audience_and_issuer_are_enforced_when_configured() -> None:
    verify = verifier(audience="sentinel-api", issuer="https://idp.example")
    good = claims(aud="sentinel-api", iss="https://idp.example")
    assert verify.tenant_from_authorization(bearer(mint(good))) == "tenant-a"
    cases = {
        "wrong aud": ({**good, "aud": "other-api"}, "audience"),
        "missing aud": ({k: v for k, v in good.items() if k != "aud"}, "aud"),
        "wrong iss": ({**good, "iss": "https://evil.example"}, "issuer"),
        "missing iss": ({k: v for k, v in good.items() if k != "iss"}, "iss"),
    }
    for name, (payload, words) in cases.items():
        failure = refusal(verify, bearer(mint(payload)))
        assert (failure.error, words in failure.description) == ("invalid_token", True), name


def test_a_token_naming_an_audience_is_refused_when_none_is_configured() -> None:
    failure = refusal(verifier(), bearer(mint(claims(aud="some-other-api"))))
    assert (failure.error, failure.description) == ("invalid_token", "token audience not accepted")


def test_leeway_accepts_slightly_expired_and_early_tokens_only() -> None:
    lenient = verifier(leeway_seconds=30)
    now = int(time.time())
    assert lenient.tenant_from_authorization(bearer(hs256(ttl=-10))) == "tenant-a"
    assert lenient.tenant_from_authorization(bearer(hs256(nbf=now + 10))) == "tenant-a"
    assert "expired" in refusal(lenient, bearer(hs256(ttl=-120))).description
    assert "yet" in refusal(lenient, bearer(hs256(nbf=now + 120))).description
    assert "expired" in refusal(verifier(), bearer(hs256(ttl=-10))).description


@pytest.mark.security
def test_algorithm_confusion_hs256_signed_with_the_rsa_public_pem_is_refused() -> None:
    pem = public_pem(rsa_private_key())
    forged = bearer(forge_hmac(claims("attacker"), pem.encode()))
    only_rsa = verifier(algorithms=["RS256"], key=None, public_key=pem)
    assert "algorithm" in refusal(only_rsa, forged).description
    # Even with HS256 allowlisted beside RS256, HMAC tokens meet only the HMAC secret.
    both = verifier(algorithms=["HS256", "RS256"], keys=[{"key": HS_SECRET}, {"public_key": pem}])
    assert refusal(both, forged).error == "invalid_token"
    assert both.tenant_from_authorization(bearer(hs256("legit"))) == "legit"


@pytest.mark.security
def test_a_public_key_configured_as_an_hmac_secret_is_a_config_error() -> None:
    pem = public_pem(rsa_private_key())
    with pytest.raises(ConfigError, match="must not be a public key") as caught:
        load_config(config(key=pem))
    assert caught.value.path == "jwt.algorithms"


@pytest.mark.parametrize("source", ["public_key", "public_key_file"])
def test_rs256_and_es256_verify_with_pem_public_keys(source: str, tmp_path: Path) -> None:
    rsa_key, ec_key = rsa_private_key(), ec_private_key()
    keys = []
    for index, key in enumerate((rsa_key, ec_key)):
        if source == "public_key":
            keys.append({"public_key": public_pem(key)})
        else:
            path = tmp_path / f"key{index}.pem"
            path.write_text(public_pem(key))
            keys.append({"public_key_file": str(path)})
    verify = verifier(algorithms=["RS256", "ES256"], key=None, keys=keys)
    assert verify.tenant_from_authorization(bearer(mint(claims("r"), rsa_key, "RS256"))) == "r"
    assert verify.tenant_from_authorization(bearer(mint(claims("e"), ec_key, "ES256"))) == "e"
    stranger = mint(claims(), rsa_private_key("stranger"), "RS256")
    assert "signature" in refusal(verify, bearer(stranger)).description
    assert refusal(verify, bearer(mint(claims(), rsa_key, "PS256"))).error == "invalid_token"


def test_key_rotation_selects_the_key_by_kid() -> None:
    old_rsa, new_rsa = rsa_private_key("2024"), rsa_private_key("2025")
    verify = verifier(
        algorithms=["RS256"],
        key=None,
        keys=[
            {"kid": "2024", "public_key": public_pem(old_rsa)},
            {"kid": "2025", "public_key": public_pem(new_rsa)},
        ],
    )
    for kid, key in (("2024", old_rsa), ("2025", new_rsa)):
        token = mint(claims(f"t-{kid}"), key, "RS256", kid=kid)
        assert verify.tenant_from_authorization(bearer(token)) == f"t-{kid}"
    # A token names its key: signed by the new key but claiming the old kid fails.
    mislabelled = mint(claims(), new_rsa, "RS256", kid="2024")
    assert "signature" in refusal(verify, bearer(mislabelled)).description
    # No kid: every key is tried; an unknown kid meets only unnamed keys (none here).
    assert verify.tenant_from_authorization(bearer(mint(claims("n"), new_rsa, "RS256"))) == "n"
    unknown = mint(claims(), new_rsa, "RS256", kid="2026")
    assert "signature" in refusal(verify, bearer(unknown)).description


def test_an_unknown_kid_falls_back_to_the_unnamed_keys() -> None:
    verify = verifier(keys=[{"kid": "a", "key": OTHER_HS_SECRET}])
    token = mint(claims("fallback"), HS_SECRET, kid="from-the-idp")
    assert verify.tenant_from_authorization(bearer(token)) == "fallback"
    wrong_kid_type = mint(claims(), HS_SECRET, kid="a").split(".")
    header_json = {"alg": "HS256", "kid": ["a"]}
    wrong_kid_type[0] = _b64(json.dumps(header_json).encode())
    assert refusal(verify, bearer(".".join(wrong_kid_type))).error == "invalid_token"


@pytest.fixture
def decode_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts PyJWT verifications (the real ``jwt.decode`` still runs)."""
    calls: list[str] = []
    real_decode = jwt.decode

    def counting_decode(token: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(token)
        return real_decode(token, *args, **kwargs)

    monkeypatch.setattr(jwt, "decode", counting_decode)
    return calls


def cached_verifier(clock: Any = time.time, cache_size: int = 4096) -> JwtVerifier:
    loaded = load_config(config()).jwt
    assert loaded is not None
    return JwtVerifier(loaded, clock=clock, cache_size=cache_size)


def test_a_token_is_verified_once_and_its_failures_never_cached(decode_calls: list[str]) -> None:
    verify = cached_verifier()
    good, forged = hs256("cached"), mint(claims(), OTHER_HS_SECRET)
    for _ in range(3):
        assert verify.tenant_from_authorization(bearer(good)) == "cached"
        assert refusal(verify, bearer(forged)).error == "invalid_token"
    assert decode_calls == [good] + [forged] * 3


def test_a_remembered_token_still_expires_and_is_still_early(decode_calls: list[str]) -> None:
    now = [time.time()]
    verify = cached_verifier(clock=lambda: now[0])
    token = bearer(hs256("clocked", ttl=60, nbf=int(now[0]) - 5))
    assert verify.tenant_from_authorization(token) == "clocked"
    now[0] += 61
    assert "expired" in refusal(verify, token).description
    now[0] -= 61 + 10
    assert "yet" in refusal(verify, token).description
    now[0] += 10
    assert verify.tenant_from_authorization(token) == "clocked"
    assert len(decode_calls) == 1


def test_the_cache_is_bounded_and_forgets_the_oldest(decode_calls: list[str]) -> None:
    verify = cached_verifier(cache_size=2)
    first, second, third = (bearer(hs256(name)) for name in ("one", "two", "three"))
    for token in (first, second, third, third, second, first):
        verify.tenant_from_authorization(token)
    # "one" was forgotten when "three" arrived; verifying it again evicts "two".
    assert len(decode_calls) == 4
    verify.tenant_from_authorization(second)
    assert len(decode_calls) == 5


def test_the_secret_can_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SENTINEL_TEST_JWT_KEY", HS_SECRET)
    verify = verifier(key=None, key_env="SENTINEL_TEST_JWT_KEY")
    assert verify.tenant_from_authorization(bearer(hs256("env"))) == "env"


@pytest.mark.parametrize(
    ("jwt_section", "words"),
    [
        ({"algorithms": ["HS512"], "key": "k" * 32}, "at least 64 bytes"),
        ({"algorithms": ["HS384"], "key": "k" * 47}, "at least 48 bytes"),
        ({"algorithms": ["RS256"], "key": None, "ec": True}, "RSA public key"),
        ({"algorithms": ["ES384"], "key": None, "ec": True}, "secp384r1"),
        ({"algorithms": ["RS256"], "key": None, "rsa_bits": 1024}, "2048 bits"),
        ({"algorithms": [["HS256"]]}, "unsupported algorithm"),
        ({"keys": [{"kid": "a", "key": HS_SECRET}, {"kid": "a", "key": HS_SECRET}]}, "one key"),
    ],
)
def test_weak_or_mismatched_keys_are_config_errors(jwt_section: dict[str, Any], words: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    section = dict(jwt_section)
    if section.pop("ec", False):
        section["public_key"] = public_pem(ec_private_key())
    if bits := section.pop("rsa_bits", None):
        section["public_key"] = public_pem(rsa.generate_private_key(65537, bits))
    with pytest.raises(ConfigError, match=words):
        load_config(config(**section))


# --- through Sentinel.guard, on the private Redis --------------------------------------


@pytest.fixture
def client(redis_url: str, redis_server: RedisServer) -> Iterator[redis.Redis]:
    connection = redis_server.client()
    yield connection
    connection.close()


@pytest.mark.security
def test_every_bad_token_is_a_401_before_any_redis_call(
    redis_url: str, client: redis.Redis
) -> None:
    seen: list[Any] = []

    class Recorder:
        from sentinel_core import hookimpl

        @hookimpl
        def sentinel_decision(self, decision: Any) -> None:
            seen.append(decision)

    sentinel = make_sentinel(config(redis_url), plugins=[Recorder()])
    scripts_before = script_calls(client)
    try:
        for name, value, error, _ in BAD_HEADERS:
            authorization = value()
            headers = {} if authorization is None else {"Authorization": authorization}
            outcome = sentinel.guard(ENDPOINT, request_view(headers=headers))
            challenge = header(outcome.headers, "WWW-Authenticate")
            assert (outcome.allowed, outcome.status) == (False, 401), name
            assert challenge is not None, name
            assert challenge.startswith("Bearer"), name
            assert (f'error="{error}"' in challenge) if error else ("error=" not in challenge)
            body = json.loads(outcome.body)
            assert (body["status"], outcome.decision, outcome.cookie) == (401, None, None)
            assert header(outcome.headers, "Content-Type") == "application/problem+json"
    finally:
        sentinel.close()
    assert client.dbsize() == 0
    assert script_calls(client) == scripts_before
    assert seen == []


def test_a_good_token_is_decided_on_its_hashed_sub(redis_url: str, client: redis.Redis) -> None:

    sentinel = make_sentinel(config(redis_url))
    try:
        outcome = sentinel.guard(ENDPOINT, request_view(headers={"authorization": bearer(hs256())}))
    finally:
        sentinel.close()
    assert (outcome.allowed, outcome.status) == (True, 200)
    digest = compact_hash("tenant-a")
    assert [key.decode() for key in client.keys("*")] == [f"sentinel:v1:{{{digest}}}:{ENDPOINT}:1"]


# --- fuzzing: whatever arrives in the header, only the documented error ----------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
_claim_names = st.sampled_from(["sub", "exp", "nbf", "iat", "aud", "iss", "kid", "alg", "x"])


@st.composite
def _structured_tokens(draw: st.DrawFn) -> str:
    """Well-formed JWS shapes with arbitrary JSON inside: reaches PyJWT's claim checks."""
    head = draw(st.dictionaries(_claim_names, _json, max_size=4))
    head.setdefault("alg", draw(st.sampled_from(["HS256", "none", "RS256", "HS512", 5])))
    payload = draw(st.dictionaries(_claim_names, _json, max_size=6) | _json)
    signature = draw(st.binary(max_size=40))
    parts = [json.dumps(head).encode(), json.dumps(payload).encode(), signature]
    return ".".join(_b64(part) for part in parts)


_header_values = (
    st.text(max_size=200)
    | st.binary(max_size=200).map(lambda raw: raw.decode("latin-1"))
    | st.text(max_size=200).map("Bearer ".__add__)
    | st.binary(max_size=200).map(lambda raw: "Bearer " + raw.decode("latin-1"))
    | _structured_tokens().map(bearer)
)


_FUZZ_VERIFIER = verifier(
    algorithms=["HS256", "RS256"],
    keys=[{"key": HS_SECRET}, {"public_key": public_pem(rsa_private_key())}],
)


@settings(max_examples=400, deadline=None)
@given(authorization=_header_values)
def test_random_authorization_values_only_ever_raise_auth_error(authorization: str) -> None:
    with pytest.raises(AuthError) as caught:
        _FUZZ_VERIFIER.tenant_from_authorization(authorization)
    assert caught.value.error in (None, "invalid_request", "invalid_token")


def test_random_authorization_values_through_guard_are_401_without_redis_traffic(
    redis_url: str, client: redis.Redis
) -> None:
    sentinel = make_sentinel(config(redis_url))
    scripts_before = script_calls(client)

    @settings(max_examples=200, deadline=None)
    @given(authorization=_header_values)
    def check(authorization: str) -> None:
        outcome = sentinel.guard(ENDPOINT, request_view(headers={"Authorization": authorization}))
        assert outcome.status == 401
        assert (header(outcome.headers, "WWW-Authenticate") or "").startswith("Bearer")

    try:
        check()
    finally:
        sentinel.close()
    assert client.dbsize() == 0
    assert script_calls(client) == scripts_before


def test_with_a_cache_size_of_zero_every_use_is_verified_again(decode_calls: list[str]) -> None:
    verify = cached_verifier(cache_size=0)
    token = hs256("uncached")
    for _ in range(3):
        assert verify.tenant_from_authorization(bearer(token)) == "uncached"

    assert decode_calls == [token] * 3


def test_a_key_of_a_family_the_loader_refuses_verifies_nothing() -> None:
    """A `JwtConfig` built by hand (past the loader's checks) with an Ed25519 key: the
    verifier keeps the key apart, so an ES256 token meets no key instead of an error."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from sentinel_core.config._identity import JwtConfig, JwtKey

    ed_pem = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    verify = JwtVerifier(JwtConfig(algorithms=("ES256",), keys=(JwtKey(None, ed_pem, True),)))
    token = mint(claims(), ec_private_key(), "ES256")

    error = refusal(verify, bearer(token))
    assert error.error == "invalid_token"
    assert error.description == "token signature invalid"
