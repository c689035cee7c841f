"""Tests of kdissect/scapy/ (tests mirror the package)."""
