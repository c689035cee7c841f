"""Tests of kdissect/conn/tls/ (tests mirror the package)."""
