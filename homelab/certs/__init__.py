"""Certificates: what the edge holds (store), the ledger of production orders and the rate-limit guard,
per-name status, and the preflight that tells whether a CA will be able to issue (preflight)."""
