#!/usr/bin/env bash
# The project's test command (the README's): formatting, vet, every test, and
# the race detector on the concurrent packages. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(find . -name '*.go' -not -name '*.pb.go' -not -path './.git/*' -print0 | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet (linux, darwin, windows)"
go vet ./...
GOOS=darwin go vet ./...
GOOS=windows go vet ./...

echo "== go test"
go test -count=1 -timeout 15m ./...

echo "== go test -race (concurrent packages)"
go test -race -count=1 -timeout 15m ./executor/... ./session/... ./data/... ./kernel/... ./graph/... \
  ./rendezvous/... ./worker/... ./master/... ./rpc/... ./server/... ./partition/... ./placement/... \
  ./allreduce/... ./train/... ./checkpoint/... ./summary/... ./estimator/... ./localcluster/... \
  ./savedmodel/... ./serving/... ./cluster/... ./metrics/... ./dashboard/... ./internal/netdelay/... \
  ./internal/stepctx/...

# The Kubernetes manifests' tests are a module of their own (so that the
# Kubernetes API types stay out of the project's go.mod).
echo "== deploy/kubernetes"
(cd deploy/kubernetes && go vet ./... && go test -count=1 -timeout 10m ./...)

# Every fuzz target for 5 s (scripts/fuzz.sh; about 21 targets, two at a
# time: under two minutes plus builds). Their seed corpora already ran above.
echo "== fuzz (5s per target)"
scripts/fuzz.sh 5s
