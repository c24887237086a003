"""Tests of the frontend language: IR, interpreter, tracer, backends, and the program suite."""
