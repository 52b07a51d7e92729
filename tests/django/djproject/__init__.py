"""A small Django project for the adapter's tests: every kind of view Sentinel guards."""
