"""Test scaffolding that is not product: pure models, checkers and load tools the tests
(and a person, from a checkout) use to hold the product to its rules."""
