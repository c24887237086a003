"""Tests of platform declarations, availability and out-of-tree registration."""
