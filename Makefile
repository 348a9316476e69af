# One entry point for the project's tasks. `make` alone lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
RUN := uv run --frozen

.PHONY: help
help: ## List the tasks
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  make %-14s %s\n", $$1, $$2}'

.PHONY: bootstrap
bootstrap: ## Install uv, the locked Python env and the PostgreSQL server binaries
	@scripts/bootstrap.sh

.PHONY: control-plane
control-plane: bootstrap ## Build (once, cached) the control plane, the real node and its images
	$(RUN) achilles dev build

# `helm lint` is all the Go that linting needs, so `make lint` builds helm alone from its
# pinned Go module (a few minutes once, then cached) and never the control plane, which
# only the cluster tier needs (tens of minutes cold). helm lint stays in the lint tier
# because a broken chart is a lint failure, found without a cluster.
.PHONY: helm
helm: bootstrap ## Build (once, cached) helm alone, from its pinned Go module
	$(RUN) achilles dev build --only helm

.PHONY: lint
lint: helm ## ruff, mypy (strict), import layering, CRD drift, helm lint
	$(RUN) ruff check operator tests bench scripts
	$(RUN) ruff format --check operator tests bench scripts
	$(RUN) mypy
	$(RUN) lint-imports
	$(RUN) achilles crds generate --check
	"$$($(RUN) python -c 'from achilles_dev.versions import bin_dir; print(bin_dir())')/helm" lint --strict charts/achilles

.PHONY: test
# Two workers, one group each (tests/workers.py): the tests on the session's clusters on
# one, everything else on the other. Most of the cluster tier waits on its servers, so
# the two overlap on two cores.
test: lint ## Everything CI runs: lint, then unit, database and cluster tests
	$(RUN) pytest -p no:cacheprovider -n 2 --dist loadgroup

.PHONY: test-unit
test-unit: bootstrap ## Pure unit tests only (no services)
	$(RUN) pytest tests/unit

.PHONY: test-db
test-db: bootstrap ## Database tests (starts its own PostgreSQL)
	$(RUN) pytest tests/db

.PHONY: test-web
test-web: bootstrap ## Web inbox browser tests (Playwright + Debian chromium; own PostgreSQL, OIDC provider, API)
	$(RUN) pytest tests/web

# ACHILLES_TEST_CLUSTER=kind runs the real-node tests on a kind cluster of the session
# instead (pytest-kind, podman), on the node image `make kind-image` builds.
.PHONY: test-cluster
test-cluster: control-plane $(if $(filter kind,$(ACHILLES_TEST_CLUSTER)),kind-image) ## Cluster tests (their own control plane and real node; ACHILLES_TEST_CLUSTER=kind: on kind)
	$(RUN) pytest tests/cluster

.PHONY: kind-image
kind-image: control-plane ## Build (once, cached) kind, kubeadm, CoreDNS and the kind node image, no registry (root)
	$(RUN) achilles dev kind-image

.PHONY: bench
bench: control-plane ## The benchmark suite at default sizes (long; see docs/performance.md)
	$(RUN) achilles bench all

.PHONY: chaos
chaos: control-plane ## The fault suite on a stack of its own (~17 min, root; see docs/reliability.md)
	$(RUN) achilles chaos all

.PHONY: dev
dev: control-plane ## The local stack with the operator, then one run of the demo agent
	$(RUN) achilles dev up
	$(RUN) achilles dev demo

.PHONY: dev-down
dev-down: ## Stop everything `make dev` started
	$(RUN) achilles dev down
