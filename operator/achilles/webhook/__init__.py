"""The adapter to the platform's notification webhook (an outbound HTTP POST)."""
