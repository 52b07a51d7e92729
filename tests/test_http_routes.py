"""Which endpoint ids a request pays for (SPEC §5): the core's one rule, framework-free.

Decorators and a ``routes`` entry naming one id charge it once; different ids all
apply; HEAD falls back to GET; route keys normalise (method case, leading ``/``), and
two keys naming one route are refused at load with the key path.
"""

from __future__ import annotations

from typing import Any

import pytest

from sentinel_core import ConfigError, load_config
from sentinel_core.adapter import RouteTable, route_key
from sentinel_core.config._routes import duplicate_route_keys, parse_route_key

POLICY = {"algorithm": "sliding_window", "rate": "3/minute", "fail_mode": "closed"}


def config(routes: dict[Any, Any]) -> dict[str, Any]:
    return {"redis_url": "memory://", "policies": {"a": POLICY, "b": POLICY}, "routes": routes}


def test_route_keys_normalise_the_method_case_and_the_leading_slash() -> None:
    assert route_key("post", " v1/items/{id} ") == "POST /v1/items/{id}"
    assert route_key("GET", "/x") == route_key("get", "x") == "GET /x"


@pytest.mark.parametrize("key", [42, "POST", "P0ST /x", ""])
def test_a_key_that_is_not_method_and_template_has_no_canonical_form(key: object) -> None:
    assert parse_route_key(key) is None


def test_duplicates_are_keys_naming_one_route_once_normalised() -> None:
    keys = ["POST /r/{id}", "GET /r/{id}", "post r/{id}", "nonsense", "POST /r/{id}/"]

    assert list(duplicate_route_keys(keys)) == [("post r/{id}", "POST /r/{id}")]


def test_duplicate_routes_entries_are_a_config_error_naming_the_key_path() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(config({"POST /r/{id}": "a", "POST r/{id}": "b"}))

    assert caught.value.path == "routes.POST r/{id}"
    assert "'POST /r/{id}'" in caught.value.problem


def test_a_decorator_and_a_route_naming_one_id_charge_it_once() -> None:
    table = RouteTable({"POST /r": "a"})

    assert table.charged("POST", ["/r"], ["a"]) == ("a",)
    assert table.charged("POST", ["r"], ["a", "a"]) == ("a",)


def test_different_ids_all_apply_decorators_first() -> None:
    table = RouteTable({"POST /r": "a"})

    assert table.charged("POST", ["/r"], ["b"]) == ("b", "a")


def test_head_falls_back_to_the_get_entry_unless_it_has_its_own() -> None:
    assert RouteTable({"GET /r": "a"}).charged("HEAD", ["/r"]) == ("a",)
    assert RouteTable({"GET /r": "a", "HEAD /r": "b"}).charged("HEAD", ["/r"]) == ("b",)
    assert RouteTable({"GET /r": "a"}).charged("POST", ["/r"]) == ()


def test_a_view_answering_any_method_pays_every_entry_of_its_route_for_an_unnamed_one() -> None:
    table = RouteTable({"POST /r": "a", "GET /r": "b", "post r/{id}": "a", "*": "d"})

    assert table.charged("PUT", ["/r"], any_method=True) == ("a", "b")
    assert table.charged("BREW", ["/nope", "r"], ["c"], any_method=True) == ("c", "a", "b")
    assert table.charged("DELETE", ["/r/{id}"], any_method=True) == ("a",)
    assert table.charged("GET", ["/r"], any_method=True) == ("b",)  # its own entry only
    assert table.charged("PUT", ["/other"], any_method=True) == ("d",)  # no entry: the default
    assert table.charged("PUT", ["/r"]) == ("d",)  # a view that answers 405 to PUT


def test_a_route_spelled_two_ways_matches_either_and_a_failed_match_charges_decorators_only() -> (
    None
):
    table = RouteTable({"GET /items/{id:int}": "a"})

    assert table.endpoint_for("GET", "/items/{id}", "/items/{id:int}") == "a"
    assert table.charged("GET", [None], ["b"]) == ("b",)
    assert not RouteTable({})
    assert table


def test_unmatched_lists_the_keys_no_route_answers_in_configuration_order() -> None:
    table = RouteTable(
        {"POST /b": "a", "HEAD /g": "a", "GET /any": "a", "DELETE /g": "a", "POST /x": "a"}
    )

    unmatched = table.unmatched([("/g", {"GET"}), ("b", {"POST"}), ("any", None)])

    assert unmatched == ["DELETE /g", "POST /x"]
    assert dict(table.items())["POST /b"] == "a"


# -- routes["*"], the default (SPEC §5, issue 27) ---------------------------------------


def test_the_default_charges_a_route_nothing_else_names() -> None:
    table = RouteTable(load_config(config({"*": "a", "POST /x": "b"})).routes)
    assert table.default == "a"
    assert table.charged("GET", ["/anything"]) == ("a",)
    assert table.charged("POST", ["/x"]) == ("b",)  # its own entry only
    assert table.charged("GET", ["/y"], ["b"]) == ("b",)  # a decorated route: its own ids
    assert table.charged("GET", ["/y"], default=False) == ()  # @exempt
    assert table.charged("GET", [None]) == ()  # routing failed: not a route of the app
    assert table.unmatched([("/x", {"POST"})]) == []  # "*" is not a route to match


def test_the_default_key_is_spelled_star_and_names_a_policy() -> None:
    assert parse_route_key(" * ") == "*"
    assert bool(RouteTable({"*": "a"}))
    assert not RouteTable({})
    with pytest.raises(ConfigError, match=r"routes\.\*: unknown endpoint id 'nope'"):
        load_config(config({"*": "nope"}))
    with pytest.raises(ConfigError, match=r'or "\*" \(the default\)'):
        load_config(config({"GET": "a"}))
