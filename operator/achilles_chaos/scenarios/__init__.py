"""The scenarios, one function each: `run(context)` fills `context.result`."""
