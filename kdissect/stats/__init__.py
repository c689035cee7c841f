"""Figures over exchanges: the latency, error and throttling summaries and
the tables `kdissect stats` prints."""
