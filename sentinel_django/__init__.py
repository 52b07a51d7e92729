"""Sentinel for Django: the adapter is being built (see the project's open issues)."""
