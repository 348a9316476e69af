"""Achilles Agent Engine: personal AI agents run as Kubernetes Jobs, journaled in PostgreSQL."""
