"""The notification outbox and the budget warnings (0014_notifications)."""
