# weir: common tasks. `make test` is the test command CI runs (see .ci/run).
GO ?= go
PG_DSN ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable

.PHONY: build test test-postgres check bench bench-go fuzz

# The version /api/version, the OpenAPI document and the Weir-Version header report:
# `git describe` of the checkout when git is available (else the build's own info).
VERSION ?= $(shell git describe --always --dirty 2>/dev/null)

build:
	$(GO) build -ldflags '-X github.com/weirhq/weir/internal/app.stampedVersion=$(VERSION)' -o bin/weir ./cmd/weir

# Every test, on SQLite and (when WEIR_TEST_POSTGRES_DSN is set) PostgreSQL.
test:
	$(GO) test -race -count=1 -timeout 30m ./...

# The black-box and process suites again with PostgreSQL as the metadata database.
# -short skips only the multi-GiB post tests, which do not touch the database and ran in `make test`.
test-postgres:
	WEIR_TEST_DB=postgres WEIR_TEST_POSTGRES_DSN='$(PG_DSN)' $(GO) test -race -short -count=1 -timeout 30m ./internal/app/... ./cmd/weir/... ./internal/store/... ./internal/meta/...

check:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# The benchmark harness: every scenario on loopback against weir and the baselines it
# starts itself, medians of 3 runs (about 10 minutes; see docs/performance.md).
# BENCHFLAGS='-quick' for a smoke run, e.g. BENCHFLAGS='-scenarios 45k,rate -out bench.md'.
bench:
	$(GO) run ./cmd/weir-bench $(BENCHFLAGS)

# The Go micro-benchmarks of the packages.
bench-go:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

# Short runs of every fuzz target (longer: FUZZTIME=5m make fuzz).
FUZZTIME ?= 20s
fuzz:
	@for t in $$(grep -rho '^func Fuzz[A-Za-z0-9_]*' --include='*_test.go' internal | sed 's/func //' | sort -u); do \
		pkg=$$(grep -rl "^func $$t(" --include='*_test.go' internal | head -1 | xargs dirname); \
		echo "== $$t ($$pkg)"; $(GO) test -run='^$$' -fuzz="^$$t\$$" -fuzztime=$(FUZZTIME) ./$$pkg || exit 1; \
	done
