"""Tests of the op references and of op selection."""
