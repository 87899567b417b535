# tidegate — confidence-gated fleet rollouts on Flux.

SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := help

TESTBIN := $(CURDIR)/bin/testbin
CONTROLLER_GEN := $(TESTBIN)/bin/controller-gen
export TIDEGATE_TESTBIN := $(TESTBIN)
export KUBEBUILDER_ASSETS := $(TESTBIN)/bin
GO_TEST_FLAGS ?=
# TEST_ENV builds every test binary, and every binary the tests build (test/shipped's CLI, the
# image's controller, the Flux plugin), one way: -trimpath, so that a checkout at another path (CI's
# fresh clone) compiles nothing again, and without cgo, as release binaries are built. So the
# dependency graph is compiled once for all of them (docs/testing.md). The race detector needs cgo:
# the race phase turns it back on.
TEST_ENV := GOFLAGS=-trimpath CGO_ENABLED=0
# E2E_PARALLEL is how many end-to-end scenarios (test/e2e, most on one shared fleet) run at once,
# the longest first, at most two of them on a fleet of their own (docs/testing.md: the measurements
# behind it). The package schedules them itself (test/e2e/schedule_test.go): go test's -parallel is
# set above the number of scenarios, so that its order does not decide which start first.
E2E_PARALLEL ?= 10
E2E_FLAGS = -parallel 100 ./test/e2e/ -args -e2e.parallel=$(E2E_PARALLEL)

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/tidegate, bin/tidegate-controller and bin/tidegate-sandbox (which `tidegate sandbox` runs).
	go build -o bin/ ./cmd/...

.PHONY: image
image: ## Build the controller's container image into dist/: a static binary on an empty base, as an OCI layout and a docker tarball (nothing pulled or pushed). VERSION=v… sets its tag.
	go run ./hack/image -o dist $(if $(VERSION),-version $(VERSION))

.PHONY: release
release: image ## Write the release into dist/: the manifests (crds.yaml, controller.yaml, admission.yaml, install.yaml, the image set by tag and digest), the CLI for linux and darwin on amd64 and arm64 (tidegate-<os>-<arch>), and SHA256SUMS over them.
	go run ./hack/release -o dist

.PHONY: testbin
testbin: ## Build and cache kube-apiserver, kube-controller-manager, etcd, Flux controllers, Prometheus and controller-gen from pinned modules (once).
	@hack/testbin.sh
	@hack/kube-controller-manager.sh
	@hack/flux-cli.sh
	@hack/flux-controllers.sh
	@hack/prometheus.sh

$(CONTROLLER_GEN):
	@hack/testbin.sh

.PHONY: flux-cli
flux-cli: ## Build and cache the Flux CLI from its pinned module (bin/flux-cli/bin/flux; once, part of testbin).
	@hack/flux-cli.sh

.PHONY: prometheus
prometheus: ## Build and cache the Prometheus server at go.mod's version (bin/prometheus/bin/prometheus; once, part of testbin).
	@hack/prometheus.sh

.PHONY: kube-controller-manager
kube-controller-manager: ## Build and cache kube-controller-manager, the local fleet hub's garbage collector (bin/kube-controller-manager/bin; once, part of testbin).
	@hack/kube-controller-manager.sh

.PHONY: install-plugin
install-plugin: ## Build bin/tidegate and install it as the Flux CLI plugin flux-fleet (`flux fleet ...`), with tidegate-sandbox beside it.
	go build -o bin/tidegate ./cmd/tidegate
	go build -o bin/tidegate-sandbox ./cmd/tidegate-sandbox
	@dir="$${FLUXCD_PLUGINS:-$$HOME/.fluxcd/plugins}"; \
		mkdir -p "$$dir" && install -m 0755 bin/tidegate "$$dir/flux-fleet" && \
		install -m 0755 bin/tidegate-sandbox "$$dir/tidegate-sandbox" && \
		echo "installed $$dir/flux-fleet: run it as 'flux fleet status ROLLOUT' (Flux CLI 2.9 or later finds it there); 'flux fleet sandbox' runs tidegate-sandbox beside it"

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC into config/.
	$(CONTROLLER_GEN) crd rbac:roleName=tidegate-controller paths=./api/... paths=./controllers/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: fmt
fmt: ## Format Go code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Vet Go code and check formatting.
	$(TEST_ENV) go vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "run make fmt"; exit 1; }

# RACE_PKGS are the packages whose tests exercise concurrency on purpose (a Sampler, a Policy and
# renders shared between goroutines, the simulator's loop beside faults changed from tests, parallel
# preflights, the collector's soak loops beside reconciles): make test runs them a second time under
# the race detector (docs/testing.md: its cost).
RACE_PKGS ?= ./verdict/ ./evidence/ ./evidence/availability/ ./evidence/collector/ ./evidence/preflight/ ./internal/simulator/

# FUZZ_TARGETS are the fuzz targets fuzz-short runs, each as package:Target:fuzztime (docs/testing.md
# lists them). go test fuzzes one target of one package per run, so they run one after the other.
# Each runs a number of inputs, not a time: with a -fuzztime in seconds, Go 1.26's fuzz coordinator
# can report its own deadline as a failure ("context deadline exceeded", no failing input) when a
# loaded machine keeps a worker busy past it (go.dev/issue/75804, fixed in Go 1.27). The counts are
# what each target ran in 3 to 10 s beside a test-binary build on two cores.
FUZZ_TARGETS ?= ./verdict/:FuzzEvaluate:1000x ./verdict/:FuzzPolicy:1000x \
	./api/v1alpha1/:FuzzReceiptEvidence:2000x ./api/v1alpha1/:FuzzStoredEvidence:3000x \
	./cmd/tidegate/:FuzzVerifyReceipt:150x \
	./evidence/install/:FuzzCheck:4000x ./internal/member/:FuzzKubeConfigSecret:800x \
	./fleets/:FuzzPlan:2000x ./fleets/:FuzzSnapshots:2000x ./evidence/:FuzzExtract:200x \
	./evidence/collector/:FuzzSplitRevision:1000x \
	./internal/attest/:FuzzDSSE:1000x ./internal/attest/:FuzzVerifyBundle:1500x \
	./evidence/:FuzzRender:150x ./cmd/tidegate/:FuzzMCPToolCall:150x

.PHONY: fuzz-short
fuzz-short: ## Fuzz each of FUZZ_TARGETS briefly, from its seeds; a failing input is kept in the package's testdata/fuzz.
	@set -e; for t in $(FUZZ_TARGETS); do \
		IFS=: read -r pkg name time <<< "$$t"; echo "=== fuzz $$name in $$pkg for $$time"; \
		$(TEST_ENV) go test -run '^$$' -fuzz "^$$name\$$" -fuzztime "$$time" -fuzzminimizetime 5x "$$pkg"; \
	done

# make test runs the packages in three phases, each marked for hack/testsummary, which prints each
# phase's time, the slowest tests and the slow fleet starts: every package but test/e2e and
# RACE_PKGS (two at a time, as go test does on two cores), then test/e2e alone, E2E_PARALLEL
# scenarios at once, then RACE_PKGS, once, under the race detector. Run beside the scale smoke and
# the sandbox, the e2e fleets met load they never meet alone: fleet starts past their five minutes,
# a scenario's timing checks missed (docs/testing.md). Each phase's -timeout (per test binary) is
# what its slowest package takes under load with room to spare, so that a wedge fails with every
# goroutine's stack long before CI's 90 minutes: 15, 30 and 10 minutes.
#
# The packages phase starts its slowest packages first (SLOW_PKGS, as measured in whole runs:
# hack/testsummary), then the others in go list's order, so that the phase does not end on one of
# them started last with the other worker idle beside it.
RACE_PKGS_RE = $(subst $(eval) ,|,$(patsubst ./%/,%,$(RACE_PKGS)))
SLOW_PKGS = ./internal/sandbox/ ./test/scale/ ./controllers/ ./test/firstrollout/ ./internal/localfleet/ ./test/shipped/ ./test/deploy/
SLOW_PKGS_RE = $(subst $(eval) ,|,$(patsubst ./%/,%,$(SLOW_PKGS)))
NON_E2E_PKGS = $(SLOW_PKGS) $$(go list ./... | grep -v -E '/test/e2e$$|/tidegate/($(RACE_PKGS_RE)|$(SLOW_PKGS_RE))$$')

.PHONY: test
test: testbin vet fuzz-short ## Run every test: the fuzz targets briefly (fuzz-short), unit and envtest, end to end, and RACE_PKGS under -race (builds the test binaries first when missing).
	mkdir -p bin
	{ echo "=== phase packages"; \
		$(TEST_ENV) go test -json $(GO_TEST_FLAGS) -count=1 -timeout 15m $(NON_E2E_PKGS); rest=$$?; \
		echo "=== phase e2e"; \
		$(TEST_ENV) go test -json $(GO_TEST_FLAGS) -count=1 -timeout 30m $(E2E_FLAGS); e2e=$$?; \
		echo "=== phase race"; \
		$(TEST_ENV) CGO_ENABLED=1 go test -json -race $(GO_TEST_FLAGS) -count=1 -timeout 10m $(RACE_PKGS); race=$$?; \
		exit $$((rest | e2e | race)); } 2>&1 | tee bin/test.json | go run ./hack/testsummary

.PHONY: test-deploy
test-deploy: testbin ## Check config/default against a real kube-apiserver: apply, RBAC, Pod Security, the controller under its ServiceAccount.
	$(TEST_ENV) go test $(GO_TEST_FLAGS) -count=1 ./test/deploy/

# IMG is the controller's image `make deploy` installs: one the cluster can pull, built by
# `make image` and pushed to a registry or loaded into the nodes. There is no default: config/manager
# names a placeholder no registry serves, and without IMG hack/deploy says how to make one.
IMG ?=

.PHONY: deploy
deploy: ## Install tidegate (config/default: the CRDs and the controller) on the cluster of the current kubeconfig context, with the controller's image IMG=<registry>/<repository>:<tag> (refuses without it, saying how to build and push or load one).
	go run ./hack/deploy -image "$(IMG)"

.PHONY: undeploy
undeploy: ## Uninstall the controller from the cluster of the current kubeconfig context, keeping the CRDs and every object of their kinds (kubectl delete -k config/controller).
	kubectl delete -k config/controller

.PHONY: test-e2e
test-e2e: testbin ## Run only the end-to-end tests on the local fleet.
	$(TEST_ENV) go test -json $(GO_TEST_FLAGS) -count=1 -timeout 30m $(E2E_FLAGS) 2>&1 | tee bin/test-e2e.json | go run ./hack/testsummary

.PHONY: transcripts
transcripts: testbin ## Write docs/transcripts/ again from a session of each entry path on the local fleet (TestE2ETranscripts; a test fails when they are stale).
	TIDEGATE_UPDATE_TRANSCRIPTS=1 $(TEST_ENV) go test $(GO_TEST_FLAGS) -count=1 -timeout 20m -run '^TestE2ETranscripts$$' ./test/e2e/

# BENCH_SCALE_ARGS go to hack/bench/scale, e.g. BENCH_SCALE_ARGS='-runs standin:1000' for one run
# (flags: go run ./hack/bench/scale -h; docs/benchmarks.md).
BENCH_SCALE_ARGS ?=

.PHONY: bench-scale
bench-scale: testbin ## Run the scale bench (100, 300, 1,000 FleetClusters on simulated Flux, and real Flux) and print its tables, also into bin/bench-scale.md.
	go build -o bin/ ./cmd/tidegate-controller
	go run ./hack/bench/scale -controller bin/tidegate-controller -out bin/bench-scale.md $(BENCH_SCALE_ARGS)

# BENCH_METRICS_ARGS go to hack/bench/metrics, e.g. BENCH_METRICS_ARGS='-clusters 1000 -window 5m'
# (flags: go run ./hack/bench/metrics -h; docs/benchmarks.md).
BENCH_METRICS_ARGS ?=

.PHONY: bench-metrics
bench-metrics: prometheus ## Run the metric evidence bench (the noDisruption gate's Prometheus queries for 100, 300, 1,000 clusters: synthetic series, a real Prometheus; about 6 minutes once Prometheus is built) and print its table, also into bin/bench-metrics.md.
	mkdir -p bin
	go run ./hack/bench/metrics -out bin/bench-metrics.md $(BENCH_METRICS_ARGS)

.PHONY: docs
docs: ## Regenerate docs/cli.md from the tidegate command tree (a test fails when it is stale).
	go run ./cmd/tidegate docs

.PHONY: demo
demo: ## Start a local sandbox fleet and play the demo (builds the test binaries first: ~30 minutes the first time).
	@test -x $(TESTBIN)/bin/kube-apiserver || echo "The sandbox runs kube-apiserver, kube-controller-manager, etcd and the Flux controllers built from pinned modules: building them once, about 30 minutes on 2 cores."
	@$(MAKE) --no-print-directory testbin
	go build -o bin/ ./cmd/tidegate ./cmd/tidegate-sandbox
	bin/tidegate sandbox up --demo
