"""The stoker daemon: REST API, scheduler core, agent link, store, and the CLI."""
