"""Tests of the conformance tooling: the device matrix and the test-server launcher."""
