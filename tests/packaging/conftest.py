"""tests/packaging builds and installs the distribution; ``user_suite`` is a user's test
suite that it runs in a fresh virtualenv, never in this process."""

collect_ignore = ["user_suite"]
