"""What the parts of the bad-input scenario share: its owners and its patience."""

START_TIMEOUT = 240.0
OWNER = "chaos-mallory"  # bad input spends its own owner's budget, nobody else's
LOOSE_OWNER = "chaos-absurd"  # the owner of the run whose model claims absurd token counts
PORTAL_USER = "chaos-portal"
