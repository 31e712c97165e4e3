#!/usr/bin/env bash
# The Kubernetes manifests (docker/k8s) pass the offline validator, and the validator
# fails each of a set of deliberately broken copies, for the reason broken.
#
#   bash tests/deploy/k8s_test.sh SOURCE_DIR WORK_DIR
#
# WORK_DIR (a build folder) gets the validator, its package.json and package-lock.json,
# and node_modules from `npm ci` (the npm registry must be reachable the first time;
# node_modules is reused while the lock file is unchanged). Nothing is written to the
# source tree. Exit status 77 (ctest's skip) when node or npm is missing.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 SOURCE_DIR WORK_DIR" >&2
  exit 2
fi
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
WORK=$(cd "$2" && pwd)
MANIFESTS="$SRC/docker/k8s"
VALIDATOR_SRC="$SRC/tests/deploy/k8s_validate"

for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool not found (dev.sh installs node and npm)"
    exit 77
  fi
done

# ---- The validator and its packages, in WORK ---------------------------------------------
if [[ -d "$WORK/node_modules" ]] && cmp -s "$VALIDATOR_SRC/package-lock.json" "$WORK/package-lock.json" &&
   cmp -s "$VALIDATOR_SRC/package.json" "$WORK/package.json"; then
  echo "== node_modules up to date in $WORK"
else
  cp "$VALIDATOR_SRC/package.json" "$VALIDATOR_SRC/package-lock.json" "$WORK/"
  echo "== npm ci in $WORK"
  (cd "$WORK" && npm ci --no-audit --no-fund)
fi
cp "$VALIDATOR_SRC/validate.mjs" "$WORK/validate.mjs"

failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

# ---- The manifests as committed pass ---------------------------------------------------
echo "== validate $MANIFESTS"
if node "$WORK/validate.mjs" "$MANIFESTS"; then
  echo "PASS: docker/k8s is valid"
else
  fail "docker/k8s does not pass the validator (output above)"
fi
echo "== validate $MANIFESTS/colocated"
if node "$WORK/validate.mjs" "$MANIFESTS/colocated"; then
  echo "PASS: docker/k8s/colocated is valid"
else
  fail "docker/k8s/colocated does not pass the validator (output above)"
fi

# ---- Broken copies fail ----------------------------------------------------------------
CASES="$WORK/cases"
rm -rf "$CASES"
mkdir -p "$CASES"

# Writes a copy of the manifests to $CASES/NAME with FILE changed by the JavaScript
# arrow function MUTATION (called with the file's first document and all of them; it
# changes them in place); prints the copy's folder.
mutated_copy() {
  local name=$1 file=$2 mutation=$3
  local dir="$CASES/$name"
  cp -r "$MANIFESTS" "$dir"
  (cd "$WORK" && node --input-type=module -e "
    import fs from 'node:fs';
    import YAML from 'yaml';
    const file = process.argv[1];
    const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8')).map((d) => d.toJS());
    const mutate = ($mutation);
    mutate(docs[0], docs);
    fs.writeFileSync(file, docs.map((d) => YAML.stringify(d)).join('---\n'));
  " "$dir/$file")
  echo "$dir"
}

# Case NAME: FILE changed by MUTATION must fail validation with a FAIL line matching
# EXPECTED (an extended regular expression).
expect_failure() {
  local name=$1 file=$2 expected=$3 mutation=$4
  local dir out status=0
  dir=$(mutated_copy "$name" "$file" "$mutation")
  out=$(node "$WORK/validate.mjs" "$dir" 2>&1) || status=$?
  if [[ $status -eq 0 ]]; then
    fail "$name: the validator accepted it"
    echo "$out" | sed 's/^/    /'
  elif ! grep -E "^FAIL .*($expected)" <<<"$out" >/dev/null; then
    fail "$name: the validator failed (status $status), but with no FAIL line matching /$expected/"
    echo "$out" | sed 's/^/    /'
  else
    echo "PASS: $name rejected:"
    grep '^FAIL' <<<"$out" | sed 's/^/    /'
  fi
}

# Case NAME: FILE changed by MUTATION must still pass (the validator's parsing, not its
# strictness, is under test).
expect_success() {
  local name=$1 file=$2 mutation=$3
  local dir out status=0
  dir=$(mutated_copy "$name" "$file" "$mutation")
  out=$(node "$WORK/validate.mjs" "$dir" 2>&1) || status=$?
  if [[ $status -ne 0 ]]; then
    fail "$name: the validator rejected it (status $status)"
    grep '^FAIL' <<<"$out" | sed 's/^/    /'
  else
    echo "PASS: $name accepted"
  fi
}

# Shorthands for the mutations.
CTR='d.spec.template.spec.containers[0]'
SET_ARG="(args, name, value) => { const i = args.findIndex((a) => a.startsWith('--' + name + '=')); if (i < 0) throw new Error('no --' + name); args[i] = '--' + name + '=' + value; }"

expect_failure termination_below_grace deployment.yaml 'terminationGracePeriodSeconds > --shutdown_grace_s' \
  "(d) => { d.spec.template.spec.terminationGracePeriodSeconds = 20; }"
expect_failure termination_equal_to_grace deployment.yaml 'terminationGracePeriodSeconds > --shutdown_grace_s' \
  "(d) => { d.spec.template.spec.terminationGracePeriodSeconds = 30; }"
expect_failure grace_raised_above_termination deployment.yaml 'terminationGracePeriodSeconds > --shutdown_grace_s' \
  "(d) => { ($SET_ARG)($CTR.args, 'shutdown_grace_s', '60'); }"
expect_failure termination_default_with_grace_default deployment.yaml 'terminationGracePeriodSeconds > --shutdown_grace_s' \
  "(d) => { delete d.spec.template.spec.terminationGracePeriodSeconds; $CTR.args = $CTR.args.filter((a) => !a.startsWith('--shutdown_grace_s')); }"
expect_failure readiness_probe_typo_grpcc deployment.yaml 'unknown fields.*readinessProbe\.grpcc' \
  "(d) => { const p = $CTR.readinessProbe; p.grpcc = p.grpc; delete p.grpc; }"
expect_failure startup_probe_typo_grpcc deployment.yaml 'unknown fields.*startupProbe\.grpcc' \
  "(d) => { const p = $CTR.startupProbe; p.grpcc = p.grpc; delete p.grpc; }"
expect_failure liveness_probe_http deployment.yaml 'livenessProbe is gRPC' \
  "(d) => { $CTR.livenessProbe = { httpGet: { path: '/metrics', port: 9464 }, periodSeconds: 10 }; }"
expect_failure readiness_probe_missing deployment.yaml 'readinessProbe is gRPC' \
  "(d) => { delete $CTR.readinessProbe; }"
expect_failure probe_on_metrics_port deployment.yaml 'readinessProbe is gRPC' \
  "(d) => { $CTR.readinessProbe.grpc.port = 9464; }"
expect_failure replicas_two_as_string deployment.yaml 'schema.*spec\.replicas' \
  "(d) => { d.spec.replicas = 'two'; }"
expect_failure container_port_as_string deployment.yaml 'schema.*containerPort' \
  "(d) => { $CTR.ports[0].containerPort = '50051'; }"
expect_failure misspelt_field deployment.yaml 'unknown fields.*terminationGracePeriod\b' \
  "(d) => { const s = d.spec.template.spec; s.terminationGracePeriod = s.terminationGracePeriodSeconds; delete s.terminationGracePeriodSeconds; }"
expect_failure gpu_limit_missing deployment.yaml 'nvidia\.com/gpu' \
  "(d) => { delete $CTR.resources.limits['nvidia.com/gpu']; delete $CTR.resources.requests['nvidia.com/gpu']; }"
expect_failure headless_selects_nothing service-headless.yaml 'gemmd-headless: selector selects' \
  "(d) => { d.spec.selector = { 'app.kubernetes.io/name': 'gemmd-typo' }; }"
expect_failure headless_not_headless service-headless.yaml 'gemmd-headless: clusterIP None' \
  "(d) => { delete d.spec.clusterIP; }"
expect_failure service_selects_nothing service.yaml 'Service/gemmd: selector selects' \
  "(d) => { d.spec.selector = { app: 'gemmd' }; }"
expect_failure service_target_port_unknown service.yaml 'Service/gemmd: ports reach' \
  "(d) => { d.spec.ports[1].targetPort = 'prometheus'; }"
expect_failure pdb_selects_nothing pdb.yaml 'PodDisruptionBudget/gemmd: selector selects' \
  "(d) => { d.spec.selector.matchLabels = { 'app.kubernetes.io/name': 'gemm' }; }"
expect_failure pdb_blocks_every_eviction pdb.yaml 'allows one eviction' \
  "(d) => { delete d.spec.maxUnavailable; d.spec.minAvailable = 2; }"
expect_failure prometheus_port_annotation deployment.yaml 'prometheus\.io/port' \
  "(d) => { d.spec.template.metadata.annotations['prometheus.io/port'] = '9465'; }"
expect_failure metrics_port_arg deployment.yaml 'prometheus\.io/port' \
  "(d) => { ($SET_ARG)($CTR.args, 'metrics_port', '9000'); }"
expect_failure runs_as_root deployment.yaml 'non-root' \
  "(d) => { d.spec.template.spec.securityContext.runAsUser = 0; delete d.spec.template.spec.securityContext.runAsNonRoot; delete $CTR.securityContext.runAsNonRoot; delete $CTR.securityContext.runAsUser; }"
expect_failure privilege_escalation deployment.yaml 'non-root' \
  "(d) => { delete $CTR.securityContext.allowPrivilegeEscalation; }"
# A kind with no Kubernetes schema (a CRD's), in a file of its own.
cp -r "$MANIFESTS" "$CASES/unknown_kind"
cat >"$CASES/unknown_kind/servicemonitor.yaml" <<'EOF'
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: gemmd
spec:
  selector:
    matchLabels:
      app.kubernetes.io/name: gemmd
EOF
printf '  - servicemonitor.yaml\n' >>"$CASES/unknown_kind/kustomization.yaml"
status=0
out=$(node "$WORK/validate.mjs" "$CASES/unknown_kind" 2>&1) || status=$?
if [[ $status -ne 0 ]] && grep -E '^FAIL .*ServiceMonitor.*known kind' <<<"$out" >/dev/null; then
  echo "PASS: unknown_kind rejected:"
  grep '^FAIL' <<<"$out" | sed 's/^/    /'
else
  fail "unknown_kind: expected a 'known kind' failure for the ServiceMonitor (status $status)"
  echo "$out" | sed 's/^/    /'
fi
expect_failure resource_missing kustomization.yaml 'exists' \
  "(k) => { k.resources.push('hpa.yaml'); }"
expect_failure kustomization_patches kustomization.yaml 'only fields this validator' \
  "(k) => { k.patches = [{ path: 'patch.yaml' }]; }"

# The validator reads flags in both of Abseil's forms.
expect_success flags_as_separate_words deployment.yaml \
  "(d) => { $CTR.args = $CTR.args.flatMap((a) => a.includes('=') ? a.split(/=(.*)/s, 2) : [a]); }"
expect_success grace_raised_with_termination deployment.yaml \
  "(d) => { ($SET_ARG)($CTR.args, 'shutdown_grace_s', '60'); d.spec.template.spec.terminationGracePeriodSeconds = 75; }"

echo
if [[ $failures -ne 0 ]]; then
  echo "k8s_test: $failures case(s) failed"
  exit 1
fi
echo "k8s_test: all cases passed"
