"""The docker tests' fixtures (engine, pebble, images, world) live in dockerlab.py, registered for the whole
session by tests/conftest.py (tests/swarm uses the same ones); the images are built in standins.py."""
