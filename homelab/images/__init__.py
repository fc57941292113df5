"""The pinned images: what homelab relies on in each (facts.py) and checking that against an image (check.py)."""
