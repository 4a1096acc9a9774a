# trainq — the two commands a newcomer needs are `make demo` and `make test`.
GO ?= go
TEMPORAL_CLI_VERSION := v1.5.1
TEMPORAL := $(CURDIR)/bin/temporal
export TRAINQ_TEMPORAL_BIN := $(TEMPORAL)

.PHONY: all build lint lint-tools race-build test-side-builds test-main test-lint test-kube test-tools test-deps temporal-bins kube-apiserver kube-etcd kube-kwok docs-check demo dev dev-k8s dev-cluster kube-bins cluster-bins test test-cluster test-cluster-run test-cluster-ci test-race test-unit bench simulate chaos scale fuzz histories vet clean mutations

all: build

## build: compile bin/trainq (the CLI), bin/trainq-worker (with bin/trainq-supervise, its workers' supervisor) and bin/trainq-api
build:
	$(GO) build -o bin/trainq ./cmd/trainq
	$(GO) build -o bin/trainq-worker ./cmd/trainq-worker
	$(GO) build -o bin/trainq-supervise ./cmd/trainq-supervise
	$(GO) build -o bin/trainq-api ./cmd/trainq-api

## bin/temporal: the pinned Temporal CLI (dev server and Web UI), built from the Go module proxy (tools/temporal),
## again when the pins there change
$(TEMPORAL): tools/temporal/go.sum
	@echo "Installing the Temporal CLI $(TEMPORAL_CLI_VERSION) into bin/ (a few minutes, once)..."
	tools/temporal/install.sh cli

## lint-tools: the pinned linters, installed into bin/ from the Go module proxy (once per version)
STATICCHECK_VERSION := v0.8.2
WORKFLOWCHECK_VERSION := v0.6.0
STATICCHECK := $(CURDIR)/bin/lint/staticcheck-$(STATICCHECK_VERSION)
WORKFLOWCHECK := $(CURDIR)/bin/lint/workflowcheck-$(WORKFLOWCHECK_VERSION)
$(STATICCHECK):
	GOBIN=$(CURDIR)/bin/lint/tmp-staticcheck $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(CURDIR)/bin/lint/tmp-staticcheck/staticcheck $@
	rmdir $(CURDIR)/bin/lint/tmp-staticcheck
$(WORKFLOWCHECK):
	GOBIN=$(CURDIR)/bin/lint/tmp-workflowcheck $(GO) install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)
	mv $(CURDIR)/bin/lint/tmp-workflowcheck/workflowcheck $@
	rmdir $(CURDIR)/bin/lint/tmp-workflowcheck
## trainq-lint (tools/lint, its own module, pinned in tools/lint/go.mod): errcheck, unparam and a shadowed-builtin
## check in one program; rebuilt when its sources change
TRAINQ_LINT := $(CURDIR)/bin/lint/trainq-lint
$(TRAINQ_LINT): tools/lint/go.mod tools/lint/go.sum $(wildcard tools/lint/*.go tools/lint/*/*.go)
	cd tools/lint && $(GO) build -o $@ .
lint-tools: $(STATICCHECK) $(WORKFLOWCHECK) $(TRAINQ_LINT)

## gotestsum runs make test's go test commands: a line per package as it ends, and at the end of each command
## the failed tests with their output, so that a failure is the last thing a CI log shows
GOTESTSUM_VERSION := v1.13.0
GOTESTSUM := $(CURDIR)/bin/lint/gotestsum-$(GOTESTSUM_VERSION)
$(GOTESTSUM):
	GOBIN=$(CURDIR)/bin/lint/tmp-gotestsum $(GO) install gotest.tools/gotestsum@$(GOTESTSUM_VERSION)
	mv $(CURDIR)/bin/lint/tmp-gotestsum/gotestsum $@
	rmdir $(CURDIR)/bin/lint/tmp-gotestsum

## lint: gofmt (every Go file formatted), go vet, staticcheck, trainq-lint (unchecked errors, unused parameters, shadowed builtins; exceptions:
## tools/lint/errcheck.exclude, and //nolint:NAME // reason next to the code), and Temporal's workflowcheck on the
## workflow code (exceptions: workflowcheck.config.yaml, and //workflowcheck:ignore with its reason next to the code)
lint: lint-tools
	@unformatted=$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted (run gofmt -w):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(TRAINQ_LINT) -errcheck.exclude=tools/lint/errcheck.exclude ./...
	cd tools/lint && $(GO) test -count=1 ./...
	$(WORKFLOWCHECK) -config workflowcheck.config.yaml ./workflows/...
	python3 scripts/allocation-mutations.py --check
	python3 scripts/attempts-mutations.py --check

## mutations: remove each condition of the allocator's and a running attempt's rules in turn; their
## tables must fail for every one (a minute or two)
mutations:
	python3 scripts/allocation-mutations.py
	python3 scripts/attempts-mutations.py

## kube-bins: the test cluster's kube-apiserver, etcd and kwok, built from the Go module proxy into
## bin/kube/ once per version (tools/kube/install.sh; about 12 minutes cold, nothing when cached; make -j builds
## the three side by side)
kube-bins: kube-apiserver kube-etcd kube-kwok
kube-apiserver kube-etcd kube-kwok:
	tools/kube/install.sh $(@:kube-%=%)

## cluster-bins: the production-shaped test cluster's Temporal server v1.29.1 and temporal-sql-tool, built from the
## Go module proxy into bin/temporal-server/ once per version, with the module's schema files (tools/temporal/install.sh)
cluster-bins: | $(TEMPORAL)
	tools/temporal/install.sh cluster
## temporal-bins: bin/temporal and cluster-bins in one build (the cluster's server is the one the CLI embeds)
temporal-bins:
	tools/temporal/install.sh all

## test-deps: the system packages the tests use for real (PostgreSQL, Python 3.9+, Debian's Jupyter server and
## Chromium), installed with apt-get where this user may, else named in one line with how to get them
test-deps:
	tools/test-deps.sh

## test-tools: everything make test needs besides Go and the sources, at once (make -j4 test-tools builds it side by side)
test-tools: test-deps temporal-bins kube-bins lint-tools $(GOTESTSUM)

## dev-cluster: like dev, on a Temporal cluster (PostgreSQL, 4 history shards, frontend/history/matching/worker apart)
dev-cluster: build cluster-bins
	$(GO) run ./internal/tempcluster/cmd/dev-cluster

## test-cluster: the part of the suite that matters on that cluster, with two trainq-workers (agents apart) and, for the
## API, two trainq-api processes behind one address; then a reduced chaos campaign there (CLUSTER_CHAOS_SEEDS)
CLUSTER_E2E := TestSeedWorkedExample|TestPreemptedJobRerunsAndCompletes|TestCancelRunningJobStopsProcessesAndFreesGPUs|TestWorkerRestartMidJob|TestTerminatedAllocatorRecovers|TestKilledAgentLosesItsNode|TestRemoteNodesMasterAddrAndLogs|TestClusterServicesRestartUnderAJob
CLUSTER_API := TestHealthConfigsAndOpenAPI|TestJobLifecycle|TestPaging|TestAuthMatrix|TestIdempotencyKey|TestRejectedRequestStartsNothing|TestPreemptionQueueRestart|TestFollowStreams|TestExampleClient|TestAPIReplicasAlternate
CLUSTER_CHAOS_SEEDS ?= 1
test-cluster: build $(TEMPORAL) cluster-bins test-cluster-run
test-cluster-run:
	TRAINQ_TEST_CLUSTER=1 $(GO) test -count=1 -timeout 15m -run '^($(CLUSTER_E2E))$$' -v ./e2e/
	TRAINQ_TEST_CLUSTER=1 $(GO) test -count=1 -timeout 10m -run '^($(CLUSTER_API))$$' ./api/
	TRAINQ_CHAOS=cluster TRAINQ_CHAOS_SEEDS=$(CLUSTER_CHAOS_SEEDS) $(GO) test -count=1 -timeout 15m -run 'TestChaos$$' -v ./e2e/
## make test runs a smaller set on the cluster (the worked example, a worker killed mid-job, every service and the
## database restarted under a job, the API through two replicas, one chaos seed), to keep a warm CI run short
CLUSTER_E2E_CI := TestSeedWorkedExample|TestWorkerRestartMidJob|TestClusterServicesRestartUnderAJob
CLUSTER_API_CI := TestJobLifecycle|TestAPIReplicasAlternate
test-cluster-ci: $(TEMPORAL) cluster-bins test-deps $(GOTESTSUM) build
	@mkdir -p $(TEST_RESULTS)
	TRAINQ_REQUIRE_CLUSTER=1 $(call gotest_step,$@-pkgs) -count=1 -timeout 10m $$($(GO) list ./... | grep -E '$(CLUSTER_PKGS)')
	TRAINQ_TEST_CLUSTER=1 $(call gotest_step,$@-e2e) -count=1 -timeout 15m -run '^($(CLUSTER_E2E_CI))$$' ./e2e/
	TRAINQ_TEST_CLUSTER=1 $(call gotest_step,$@-api) -count=1 -timeout 10m -run '^($(CLUSTER_API_CI))$$' ./api/
	TRAINQ_CHAOS=cluster TRAINQ_CHAOS_SEEDS=1 $(call gotest_step,$@-chaos) -count=1 -timeout 15m -run 'TestChaos$$' ./e2e/

## demo: start a dev server and a worker, play the priorities page's worked example; Ctrl-C stops all
demo: build $(TEMPORAL)
	scripts/dev.sh demo

## dev: like demo, without the demo
dev: build $(TEMPORAL)
	scripts/dev.sh

## dev-k8s: like dev, with jobs running as pods on a local kube-apiserver whose nodes kwok plays
dev-k8s: build $(TEMPORAL) kube-bins
	$(GO) run ./internal/kubetest/cmd/dev-k8s

## test: every test, including the ones against a real Temporal dev server, a real kube-apiserver and the
## production-shaped Temporal cluster, and the packages that need no server once more under the race detector.
## Its steps: the main run on a dev server (test-main); then the Kubernetes tests (test-kube) and the cluster's set
## (test-cluster-ci), one after the other, while beside them the race detector (test-race), go vet, the linters and
## the docs check (test-lint) run a package at a time (GOFLAGS=-p=1), so that they take about one of the two cores.
## Steps with servers never run side by side: they would slow each other down; the checks beside them start none.
## The main run starts once the Temporal CLI is built, and what the later steps need (test-side-builds) is built
## beside it, its output in $(TEST_RESULTS)/side-builds.log: the main run's end-to-end tests mostly wait on timers and
## processes. The checks' output is kept in $(TEST_RESULTS)/checks.log and printed once the server steps end, so that
## the two never interleave (a failed check's output comes then, not as it fails).
## TEST_RESULTS (bin/test-results) keeps each step's go test -json; tools/test-recap.sh prints its failures again.
TEST_RESULTS ?= $(CURDIR)/bin/test-results
gotest_step = $(GOTESTSUM) --jsonfile $(TEST_RESULTS)/$(1).json --format pkgname-and-test-fails --format-hide-empty-pkg --
KUBE_PKGS := /e2e/kube$$|/deploy/kubernetes$$|/internal/kubetest$$
CLUSTER_PKGS := /internal/tempcluster$$
test: $(TEMPORAL) test-deps $(GOTESTSUM) build
	@mkdir -p $(TEST_RESULTS); start=$$(date +%s); \
	echo "make test: building the later steps' tools beside the main run ($(TEST_RESULTS)/side-builds.log)"; \
	setsid $(MAKE) --no-print-directory -j1 test-side-builds > $(TEST_RESULTS)/side-builds.log 2>&1 & side=$$!; \
	trap 'kill -TERM -- -$$side 2>/dev/null' INT TERM HUP; \
	$(MAKE) --no-print-directory -j1 test-main; main=$$?; \
	if [ $$main -ne 0 ]; then kill -TERM -- -$$side 2>/dev/null; exit $$main; fi; \
	if ! wait $$side; then echo "make test: building the later steps' tools failed:"; tail -n 30 $(TEST_RESULTS)/side-builds.log; exit 1; fi; \
	echo "make test: the later steps' tools were ready $$(( $$(date +%s) - start ))s after the main run began"; \
	echo "make test: the race detector and the linters run beside the Kubernetes and cluster steps, a package at a time ($(TEST_RESULTS)/checks.log, printed when they end)"; \
	GOFLAGS="$$GOFLAGS -p=1" setsid $(MAKE) --no-print-directory -j1 test-race test-lint > $(TEST_RESULTS)/checks.log 2>&1 & checks=$$!; \
	trap 'kill -TERM -- -$$checks 2>/dev/null' INT TERM HUP; \
	$(MAKE) --no-print-directory -j1 test-kube test-cluster-ci; servers=$$?; \
	if [ $$servers -ne 0 ]; then \
		kill -TERM -- -$$checks 2>/dev/null; wait $$checks; \
		echo "make test: the race detector and the linters were stopped; their output until then ($(TEST_RESULTS)/checks.log):"; tail -n 20 $(TEST_RESULTS)/checks.log; \
		echo "make test: the Kubernetes or cluster step failed (above)"; exit $$servers; fi; \
	wait $$checks; checked=$$?; \
	echo "make test: the race detector and the linters ($(TEST_RESULTS)/checks.log):"; cat $(TEST_RESULTS)/checks.log; \
	if [ $$checked -ne 0 ]; then echo "make test: the race detector or the linters failed (above)"; exit $$checked; fi; \
	echo "make test: passed in $$(( $$(date +%s) - start ))s"
## test-side-builds: what test-kube, test-cluster-ci, test-race and test-lint need, in the order they need it
test-side-builds: kube-bins cluster-bins race-build lint-tools
test-main: $(TEMPORAL) test-deps $(GOTESTSUM) build
	@mkdir -p $(TEST_RESULTS)
	$(call gotest_step,$@) -count=1 -timeout 40m $$($(GO) list ./... | grep -v -E '$(KUBE_PKGS)|$(CLUSTER_PKGS)|/internal/docscheck$$')
test-kube: kube-bins $(GOTESTSUM)
	@mkdir -p $(TEST_RESULTS)
	TRAINQ_REQUIRE_KUBE=1 $(call gotest_step,$@) -count=1 -timeout 10m $$($(GO) list ./... | grep -E '$(KUBE_PKGS)')
test-lint: docs-check lint

## test-race: under the race detector, the packages that run goroutines and need no server (their tests that
## need a dev server skip, as in test-unit). The pure packages (scheduler, simulate, allocation, protocol,
## config) start none, so the detector has nothing to find there; they ran in test. Nor the Kubernetes harness and
## manifests (internal/kubetest, deploy/kubernetes): their tests start a kube-apiserver, and ran in test-kube, which
## test-race runs beside.
RACE_SKIP_PKGS := /(e2e|e2e/kube|deploy/kubernetes|internal/kubetest|scheduler|simulate|allocation|protocol|config|internal/docscheck)$$
## race-build compiles test-race's packages into the build cache (the test binaries it links are thrown away):
## make -j2 test does it beside the main run, so that test-race then mostly runs them
race-build:
	@dir=$$(mktemp -d) && $(GO) test -race -c -o $$dir/ $$($(GO) list ./... | grep -v -E '$(RACE_SKIP_PKGS)') && rm -rf $$dir
test-race: $(GOTESTSUM)
	@mkdir -p $(TEST_RESULTS)
	TRAINQ_SKIP_E2E=1 $(call gotest_step,$@) -race -count=1 -timeout 30m $$($(GO) list ./... | grep -v -E '$(RACE_SKIP_PKGS)')

## docs-check: every make target, go test and trainq command shown in README.md and docs/*.md exists, with the
## flags it uses (internal/docscheck; builds the binaries, asks them for --help, needs no server; make test runs it
## first, and leaves it out of its go test list so that it runs once)
docs-check: $(GOTESTSUM)
	@mkdir -p $(TEST_RESULTS)
	$(call gotest_step,$@) -count=1 ./internal/docscheck/

## test-unit: the tests that need no server
test-unit:
	TRAINQ_SKIP_E2E=1 $(GO) test ./...

## bench: scheduler benchmarks, the end-to-end throughput benchmark (200 jobs, 32 GPUs, with preemption rounds
## and the bare-Temporal baseline) and the large one (2,000 jobs, 256 GPUs), each on a fresh dev server
## CLUSTER=1: the end-to-end throughput benchmark on the production-shaped cluster instead (two trainq-workers with the
## agents apart; the bare-Temporal baseline on the same cluster in the same run); the others are dev-server measurements
bench: build $(TEMPORAL) $(if $(CLUSTER),cluster-bins)
ifeq ($(CLUSTER),)
	$(GO) test -run '^$$' -bench . -benchmem ./scheduler/
	TRAINQ_BENCH=1 $(GO) test -count=1 -timeout 15m -run 'TestBenchmarkCost' -v ./e2e/
	TRAINQ_BENCH=1 $(GO) test -count=1 -timeout 30m -run 'TestBenchmarkThroughput' -v ./e2e/
	TRAINQ_BENCH=1 $(GO) test -count=1 -timeout 30m -run 'TestBenchmarkLarge' -v ./e2e/
else
	TRAINQ_TEST_CLUSTER=1 TRAINQ_BENCH=1 $(GO) test -count=1 -timeout 30m -run 'TestBenchmarkThroughput' -v ./e2e/
endif

## scale: one allocation with 20,000 waiting jobs, its allocator continuing as new under load; fails unless
## every job is granted once and ends and nothing is held at the end (TRAINQ_SCALE_JOBS, TRAINQ_SCALE_UPDATES); and a
## job through 50 attempts with a low history threshold, printing its events per run and per attempt
scale: build $(TEMPORAL)
	TRAINQ_SCALE=1 $(GO) test -count=1 -timeout 60m -run 'TestQueueAtScale|TestJobHistoryThroughFiftyAttempts' -v ./e2e/

## chaos: the chaos campaign, SEEDS=N seeds (1..N, or TRAINQ_CHAOS_SEEDS=3,7,11), each its own plan in about a minute
## and a half: kill -9 of trainq-worker, node agents and the dev server, agent outages around node_timeout and while two
## jobs run on one node, allocator terminates and resets, job resets, bursts of grants, a recovery listing that lags
## (TRAINQ_TEST_LISTING_LAG) and a job whose workflow task cannot run; fails unless every GPU had one
## holder (workers' records and server histories), every job ended and no workflow task failed. Without SEEDS: the full
## run, 200 jobs under fixed faults (TRAINQ_CHAOS_SEED). TRAINQ_CHAOS_REPORT=file gets the Markdown report.
SEEDS ?=
chaos: build $(TEMPORAL)
	@seeds="$(TRAINQ_CHAOS_SEEDS)"; if [ -z "$$seeds" ] && [ -n "$(SEEDS)" ]; then seeds="1-$(SEEDS)"; fi; \
	if [ -n "$$seeds" ]; then \
		n=$$(echo "$$seeds" | tr ',' '\n' | awk -F- 'NF { n += ($$2 == "" ? 1 : $$2 - $$1 + 1) } END { print n }'); \
		echo "TRAINQ_CHAOS=campaign TRAINQ_CHAOS_SEEDS=$$seeds: $$n seeds, up to 5 minutes each"; \
		TRAINQ_CHAOS=campaign TRAINQ_CHAOS_SEEDS="$$seeds" $(GO) test -count=1 -timeout $$((n * 5 + 5))m -run 'TestChaos$$' -v ./e2e/; \
	else \
		TRAINQ_CHAOS=full $(GO) test -count=1 -timeout 25m -run 'TestChaos$$' -v ./e2e/; \
	fi

## simulate: replay the Alibaba GPU v2023 trace through the scheduler under each policy (TRACE=dir, NODES=10)
TRACE ?= ../shared/traces/alibaba-gpu-v2023
NODES ?= 10
simulate: build
	bin/trainq simulate --trace $(TRACE) --nodes $(NODES)

## fuzz: run the fuzz targets for a while (FUZZTIME=2m), and the API's whole request path
## (method, path, query, headers, body through every handler) for API_FUZZTIME (10m)
FUZZTIME ?= 60s
API_FUZZTIME ?= 10m
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzEvents -fuzztime $(FUZZTIME) -fuzzminimizetime 10s ./scheduler/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRunJobRequest$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 10s ./api/
	$(GO) test -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime $(API_FUZZTIME) -fuzzminimizetime 10s ./api/

## histories: record the workflow histories of a release (RELEASE=v1.2.3; ONLY=name,... to pick some), replayed by every later release's tests
histories: build $(TEMPORAL)
	@if [ -z "$(RELEASE)" ]; then echo "make histories needs RELEASE=<version>: histories are kept per release under workflows/testdata/histories/"; exit 2; fi
	TRAINQ_RECORD_HISTORIES=1 TRAINQ_RELEASE=$(RELEASE) TRAINQ_RECORD_ONLY=$(ONLY) $(GO) test -count=1 -timeout 10m -run 'TestRecord' -v ./e2e/

clean:
	rm -rf bin/trainq bin/trainq-worker bin/trainq-supervise
