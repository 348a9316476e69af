"""The fault suite (`achilles chaos`): kill, freeze, partition and double-lead the system on
the local stack, and check the journal, the Jobs and the Agents against the invariants.

Checkout-only, like `achilles_dev` and `bench`: not in the wheel, never imported by the
product. See docs/reliability.md for the guarantees and the figures of the last run.
"""
