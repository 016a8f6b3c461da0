"""The scheduler core: pure state + event -> commands, no sockets, threads or clocks."""
