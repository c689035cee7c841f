"""The plain data every layer passes on: the slot-record base and `TcpSegment`,
times, the exchange row, its problems, the run's accounting. No I/O."""
