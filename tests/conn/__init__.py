"""Tests of kdissect/conn/ (tests mirror the package)."""
