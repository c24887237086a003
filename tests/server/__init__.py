"""Tests of the HTTP server's protocol layer."""
