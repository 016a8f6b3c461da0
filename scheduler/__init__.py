"""The decision core, pure: events in, commands out (DESIGN.md, "Scheduler core").

No sockets, files, threads or clocks: the daemon and the simulator feed it the same typed
events and carry out the same typed commands. Admission, the arrival and completion
buffers, the reallocation gate, restart and re-attach decisions, which telemetry becomes a
TPM sample and whether a refit is accepted all live here, once.
"""
