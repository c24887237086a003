"""End-to-end tests against a real `sglang serve` process (the shipped suite's fixtures)."""
