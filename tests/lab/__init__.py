"""Tests over the capture lab: live brokers and clients, their recordings."""
