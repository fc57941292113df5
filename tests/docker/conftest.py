"""Fixtures of the docker tests (the helpers live in dockerlab.py, the images in standins.py)."""

from dockerlab import engine, images, pebble, world  # noqa: F401 - session fixtures
