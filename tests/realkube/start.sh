#!/usr/bin/env bash
# Start a REAL Kubernetes control plane on 127.0.0.1: etcd + kube-apiserver (+ kube-controller-manager).
# kelpie's real-server test tier (tests/realkube/cluster.py) runs it; adapted from the team's recipe.
#
#   start.sh [CACHE_DIR]        CACHE_DIR default: ${REALKUBE_CACHE:-$HOME/.cache/realkube}
#
# Binaries are built once into CACHE_DIR/bin and reused. Where they come from, on this
# workplace's `python` machines (registries: Debian, PyPI, npm; NO Go module proxy):
#   - Go: Debian's golang-go (1.19);
#   - Kubernetes: the Debian bookworm *source* package `kubernetes` (1.20.5+really1.20.2,
#     the full upstream v1.20.2 tree with vendor/), fetched with `apt-get source` through a
#     private apt config under CACHE_DIR/apt (deb + deb-src lines derived from the Debian
#     archives this machine's apt already uses; nothing in /etc/apt is changed);
#   - etcd: Debian's etcd-server (3.4.23), installed with apt-get if `etcd` is missing.
# Three fix-ups make Go 1.19 build the Go-1.15-era tree: vendor/modules.txt reordered (fix_vendor),
# reflect2 1.0.2 + json-iterator 1.1.12 swapped in from Debian's -dev packages (fix_vendor),
# pkg/generated/openapi generated with the vendored openapi-gen (gen_openapi).
# First build: ~12-15 min on 2 cores (~1.4 GB RSS peak, ~2 GB under CACHE_DIR); later starts ~10 s.
#
# Every run gets a fresh etcd data dir and fresh state under CACHE_DIR/run (REALKUBE_RUN to
# override). Ports: REALKUBE_APISERVER_PORT / REALKUBE_ETCD_PORT, else free ones are picked.
# REALKUBE_KCM=0 skips kube-controller-manager (then Deployments get no ReplicaSets/Pods).
#
# Tokens (static token file, RBAC authorizer):
#   admin   user realkube-admin, group system:masters
#   kelpie  user kelpie, group kelpie:operators -> no RBAC of its own (tests/realkube binds the shipped one)
#   viewer  user kelpie-viewer, no group -> RoleBinding to ClusterRole view in namespace shop only
# A kubeconfig per token is written: RUN/admin.kubeconfig, RUN/kelpie.kubeconfig, RUN/viewer.kubeconfig.
#
# Output: progress on stderr; the LAST line on stdout is the admin kubeconfig path.
# RUN/env is a shell file with every path, port, pid and token. stop.sh [CACHE_DIR] stops it.
set -euo pipefail

CACHE=${1:-${REALKUBE_CACHE:-$HOME/.cache/realkube}}
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
RUN=${REALKUBE_RUN:-$CACHE/run}
BIN=$CACHE/bin
K8S_VERSION=v1.20.2
K8S_SRC_DIR=$CACHE/src/kubernetes-1.20.2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { echo "realkube: $*" >&2; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

apt_install() {  # apt_install PKG...: install Debian packages (root), once
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || { log "need root to apt-get install ${missing[*]}"; exit 1; }
  if [ ! -f "$CACHE/.apt-updated" ]; then apt-get update -qq >&2; touch "$CACHE/.apt-updated"; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

apt_lines() {  # deb + deb-src lines for the Debian archives this machine's apt already uses
  python3 - <<'PY'
import glob, re
out = []
def emit(uri, suites, comps):
    for s in suites:
        for kind in ("deb", "deb-src"):
            out.append(f"{kind} [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {uri} {s} {' '.join(comps)}")
for f in glob.glob("/etc/apt/sources.list.d/*.sources"):
    for stanza in open(f).read().split("\n\n"):
        d = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            k, v = line.split(":", 1)
            d[k.strip().lower()] = v.split()
        if "deb" in d.get("types", []) and "debian-archive-keyring" in " ".join(d.get("signed-by", [])):
            for uri in d.get("uris", []):
                emit(uri, d.get("suites", []), d.get("components", ["main"]))
for f in ["/etc/apt/sources.list"] + glob.glob("/etc/apt/sources.list.d/*.list"):
    try:
        lines = open(f).read().splitlines()
    except OSError:
        continue
    for line in lines:
        m = re.match(r"deb\s+(\[[^]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)", line)
        if m and "debian" in m.group(2):
            emit(m.group(2), [m.group(3)], m.group(4).split())
print("\n".join(dict.fromkeys(out)))
PY
}

apt_private() {  # apt-get with a private config under CACHE/apt (nothing in /etc/apt changes)
  if [ ! -f "$CACHE/apt/.updated" ]; then
    mkdir -p "$CACHE/apt/lists/partial" "$CACHE/apt/archives/partial"
    apt_lines > "$CACHE/apt/sources.list"
    [ -s "$CACHE/apt/sources.list" ] || { log "no Debian apt source configured on this machine"; exit 1; }
    apt-get "${APT_PRIVATE[@]}" update -qq >&2
    touch "$CACHE/apt/.updated"
  fi
  apt-get "${APT_PRIVATE[@]}" "$@"
}
APT_PRIVATE=(-o "Dir::Etc::SourceList=$CACHE/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$CACHE/apt/lists" -o "Dir::Cache=$CACHE/apt" -o APT::Sandbox::User=root)

fetch_source() {
  [ -d "$K8S_SRC_DIR/cmd/kube-apiserver" ] && return 0
  local t0; t0=$(now)
  mkdir -p "$CACHE/src"
  (cd "$CACHE/src" && apt_private -qq source --download-only kubernetes 2>&1 | grep -v 'Download is performed unsandboxed' >&2 || true)
  local orig; orig=$(ls "$CACHE"/src/kubernetes_*really1.20.2.orig.tar.gz 2>/dev/null | head -1)
  [ -n "$orig" ] || { log "apt-get source kubernetes gave no 1.20.2 orig tarball (Debian moved on?)"; exit 1; }
  tar xzf "$orig" -C "$CACHE/src"
  log "source: $(basename "$orig") ($(du -m "$orig" | cut -f1) MB) in $(since "$t0")s"
}

fix_vendor() {
  # Go >= 1.17 reads a Go-1.15 vendor/modules.txt differently: a wildcard replacement line
  # ("# mod => mod vX") that follows the versioned one makes the packages belong to the
  # version-less module, so Go selects version "" and fails with "updates to go.mod needed".
  # Put each wildcard line before its versioned line. Also drop "// indirect" marks, which
  # -mod=vendor would otherwise insist on updating.
  [ -f "$K8S_SRC_DIR/.realkube-fixed" ] && return 0
  python3 - "$K8S_SRC_DIR/vendor/modules.txt" <<'EOF'
import sys
path = sys.argv[1]
blocks = []
for line in open(path).read().splitlines():
    if line.startswith("# ") or not blocks:
        blocks.append([line])
    else:
        blocks[-1].append(line)
out, i = [], 0
while i < len(blocks):
    b = blocks[i]
    f = b[0][2:].split()
    if i + 1 < len(blocks):
        n = blocks[i + 1]
        g = n[0][2:].split()
        if len(f) >= 2 and f[1] != "=>" and len(g) >= 2 and g[1] == "=>" and g[0] == f[0]:
            out += [[n[0]], b + n[1:]]
            i += 2
            continue
    out.append(b)
    i += 1
open(path, "w").write("\n".join(l for blk in out for l in blk) + "\n")
EOF
  sed -i 's# // indirect$##' "$K8S_SRC_DIR/go.mod"
  # modern-go/reflect2 v1.0.1 (vendored by 1.20) breaks on Go >= 1.18: every request whose
  # body json-iterator decodes into a struct with a map panics (nil pointer in reflect2.Type2,
  # HTTP/2 INTERNAL_ERROR to the client). Upstream's fix is reflect2 1.0.2 + json-iterator
  # 1.1.12; Debian ships exactly those as source packages (-dev .debs): swap them in.
  local debs=$CACHE/debs
  mkdir -p "$debs" && (cd "$debs" && apt_private -qq download golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev 2>&1 | grep -v 'Download is performed unsandboxed' >&2 || true)
  for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$debs/x"; done
  local gs=$debs/x/usr/share/gocode/src/github.com v=$K8S_SRC_DIR/vendor/github.com
  [ -f "$gs/modern-go/reflect2/go_above_118.go" ] || { log "Debian reflect2 source not as expected"; exit 1; }
  rm -f "$v/modern-go/reflect2/"*.go "$v/modern-go/reflect2/"*.s "$v/json-iterator/go/"*.go
  cp "$gs/modern-go/reflect2/"*.go "$gs/modern-go/reflect2/"*.s "$v/modern-go/reflect2/"
  (cd "$gs/json-iterator/go" && cp $(ls ./*.go | grep -v _test.go) "$v/json-iterator/go/")
  touch "$K8S_SRC_DIR/.realkube-fixed"
}

gen_openapi() {
  # The release tarball lacks pkg/generated/openapi/zz_generated.openapi.go (upstream's
  # `make` generates it); kube-apiserver does not compile without it. Same inputs as
  # Makefile.generated_files: every staging/pkg dir with a "+k8s:openapi-gen=" tag.
  local out=$K8S_SRC_DIR/pkg/generated/openapi/zz_generated.openapi.go
  [ -s "$out" ] && return 0
  local t0; t0=$(now)
  (cd "$K8S_SRC_DIR" && GOPATH=$CACHE/gopath GOCACHE=$CACHE/gocache GOFLAGS=-mod=vendor GOPROXY=off \
     GO111MODULE=on CGO_ENABLED=0 go build -o "$BIN/openapi-gen" k8s.io/kube-openapi/cmd/openapi-gen)
  mkdir -p "$CACHE/gopath-gen/src/k8s.io"
  ln -sfn "$K8S_SRC_DIR" "$CACHE/gopath-gen/src/k8s.io/kubernetes"
  local dirs
  dirs=$(cd "$K8S_SRC_DIR" && find -H . \( -not \( \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune \) \) \
           -name '*.go' -type f | sed -e 's|^./staging/src|vendor|' -e 's|^\./||' \
         | xargs grep --color=never -l '^// *+k8s:openapi-gen=' 2>/dev/null \
         | grep -v -E '^vendor/k8s.io/(code-generator|sample-apiserver)/' | xargs -n1 dirname | LC_ALL=C sort -u \
         | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
  (cd "$CACHE/gopath-gen/src/k8s.io/kubernetes" && GO111MODULE=off GOPATH=$CACHE/gopath-gen GOFLAGS= \
     "$BIN/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
     -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r "$CACHE/openapi-violations.report" 2>&1 | tail -3 >&2)
  [ -s "$out" ] || { log "openapi-gen wrote nothing"; exit 1; }
  log "generated pkg/generated/openapi in $(since "$t0")s"
}

build() {
  local want=("$@") todo=()
  for c in "${want[@]}"; do [ -x "$BIN/$c" ] || todo+=("$c"); done
  [ ${#todo[@]} -eq 0 ] && return 0
  # one build per cache dir: a second start.sh waits for the first one's build, then reuses it
  if command -v flock >/dev/null 2>&1; then
    exec 8>"$CACHE/.build.lock"
    flock -n 8 || { log "another start.sh is building in $CACHE; waiting for it"; flock -w 3600 8; }
    todo=(); for c in "${want[@]}"; do [ -x "$BIN/$c" ] || todo+=("$c"); done
    [ ${#todo[@]} -eq 0 ] && { exec 8>&-; return 0; }
  fi
  log "building ${todo[*]} from Debian's kubernetes source package (first time: 12-15 min on 2 cores)"
  apt_install golang-go
  fetch_source
  fix_vendor
  mkdir -p "$BIN"
  gen_openapi
  local v=k8s.io/component-base/version c=k8s.io/client-go/pkg/version
  local ld="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=20 -X $v.gitTreeState=clean"
  ld+=" -X $v.gitCommit=faecb196815e248d3ecfb03c680a4507229c2a56 -X $c.gitVersion=$K8S_VERSION -X $c.gitMajor=1 -X $c.gitMinor=20"
  for cmd in "${todo[@]}"; do
    local t0; t0=$(now)
    (cd "$K8S_SRC_DIR" && GOPATH=$CACHE/gopath GOCACHE=$CACHE/gocache GOFLAGS=-mod=vendor GOPROXY=off \
       GO111MODULE=on CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$BIN/$cmd.tmp" "./cmd/$cmd")
    mv "$BIN/$cmd.tmp" "$BIN/$cmd"
    log "built $cmd ($(du -m "$BIN/$cmd" | cut -f1) MB) in $(since "$t0")s"
  done
  exec 8>&-  # release the build lock (the servers started below must not inherit it)
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port_free() { ! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }

# ---------------------------------------------------------------------------------------
T_ALL=$(now)
components=(kube-apiserver)
[ "${REALKUBE_KCM:-1}" = 1 ] && components+=(kube-controller-manager)
build "${components[@]}"
command -v etcd >/dev/null || apt_install etcd-server
command -v curl >/dev/null || apt_install curl

if [ -f "$RUN/env" ]; then
  # read only the old pids (in a subshell: the old env must not leak its ports into this run)
  old_pids=$(REALKUBE_PIDS=""; . "$RUN/env" >/dev/null 2>&1; echo "${REALKUBE_PIDS:-}")
  for p in $old_pids; do
    if kill -0 "$p" 2>/dev/null; then log "already running (pid $p); run stop.sh first"; exit 1; fi
  done
fi
rm -rf "$RUN"; mkdir -p "$RUN/pki" "$RUN/logs"

APISERVER_PORT=${REALKUBE_APISERVER_PORT:-$(free_port)}
ETCD_PORT=${REALKUBE_ETCD_PORT:-$(free_port)}
ETCD_PEER_PORT=$(free_port)
for p in "$APISERVER_PORT" "$ETCD_PORT" "$ETCD_PEER_PORT"; do port_free "$p" || { log "port $p is taken"; exit 1; }; done

# --- PKI: a CA, a serving cert for 127.0.0.1/localhost, a service-account key pair
(
  cd "$RUN/pki"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=realkube-ca" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' > ext.cnf
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 -extfile ext.cnf 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
)
rand() { python3 -c 'import secrets; print(secrets.token_hex(16))'; }
ADMIN_TOKEN=$(rand); KELPIE_TOKEN=$(rand); VIEWER_TOKEN=$(rand)
cat > "$RUN/pki/tokens.csv" <<EOF
$ADMIN_TOKEN,realkube-admin,uid-admin,"system:masters"
$KELPIE_TOKEN,kelpie,uid-kelpie,"kelpie:operators"
$VIEWER_TOKEN,kelpie-viewer,uid-viewer
EOF
chmod 600 "$RUN/pki/"*.key "$RUN/pki/tokens.csv"

SERVER=https://127.0.0.1:$APISERVER_PORT
kubeconfig() {  # kubeconfig NAME TOKEN
  cat > "$RUN/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: realkube
  cluster:
    server: $SERVER
    certificate-authority: $RUN/pki/ca.crt
users:
- name: $1
  user:
    token: $2
contexts:
- name: realkube-$1
  context: {cluster: realkube, user: $1}
current-context: realkube-$1
EOF
}
kubeconfig admin "$ADMIN_TOKEN"; kubeconfig kelpie "$KELPIE_TOKEN"; kubeconfig viewer "$VIEWER_TOKEN"

PIDS=""
start_bg() {  # start_bg NAME CMD...: own session (setsid), so stop.sh can end it by pid
  local name=$1; shift
  setsid "$@" > "$RUN/logs/$name.log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" > "$RUN/$name.pid"
  PIDS="$PIDS $pid"
}
write_env() {
  cat > "$RUN/env" <<EOF
REALKUBE_RUN=$RUN
REALKUBE_SERVER=$SERVER
REALKUBE_APISERVER_PORT=$APISERVER_PORT
REALKUBE_ETCD_PORT=$ETCD_PORT
REALKUBE_CA=$RUN/pki/ca.crt
REALKUBE_ADMIN_TOKEN=$ADMIN_TOKEN
REALKUBE_KELPIE_TOKEN=$KELPIE_TOKEN
REALKUBE_VIEWER_TOKEN=$VIEWER_TOKEN
REALKUBE_ADMIN_KUBECONFIG=$RUN/admin.kubeconfig
REALKUBE_KELPIE_KUBECONFIG=$RUN/kelpie.kubeconfig
REALKUBE_VIEWER_KUBECONFIG=$RUN/viewer.kubeconfig
REALKUBE_PIDS="$PIDS"
REALKUBE_VERSION=$K8S_VERSION
EOF
}
fail() { log "$1; logs in $RUN/logs"; tail -20 "$RUN/logs/$2.log" >&2 || true; "$HERE/stop.sh" "$CACHE" >&2 || true; exit 1; }

T_START=$(now)
start_bg etcd etcd --name realkube --data-dir "$RUN/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "realkube=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
  --quota-backend-bytes 1073741824 --logger zap --log-level warn
write_env
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null || fail "etcd did not become healthy" etcd
log "etcd $(etcd --version | head -1 | awk '{print $3}') healthy on 127.0.0.1:$ETCD_PORT after $(since "$T_START")s"

start_bg kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --secure-port "$APISERVER_PORT" --insecure-port 0 \
  --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
  --tls-cert-file "$RUN/pki/apiserver.crt" --tls-private-key-file "$RUN/pki/apiserver.key" \
  --client-ca-file "$RUN/pki/ca.crt" --token-auth-file "$RUN/pki/tokens.csv" \
  --authorization-mode RBAC --anonymous-auth=false \
  --service-account-key-file "$RUN/pki/sa.pub" --service-account-signing-key-file "$RUN/pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range 10.96.0.0/16 --cert-dir "$RUN/pki/generated" \
  --profiling=false --watch-cache=true
write_env
ready=0
for _ in $(seq 1 600); do
  kill -0 "$(cat "$RUN/kube-apiserver.pid")" 2>/dev/null || fail "kube-apiserver exited" kube-apiserver
  if curl -sf --cacert "$RUN/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" "$SERVER/readyz" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.1
done
[ $ready = 1 ] || fail "kube-apiserver not ready after 60s" kube-apiserver
log "kube-apiserver $K8S_VERSION ready at $SERVER after $(since "$T_START")s"

# --- RBAC for the kelpie and viewer identities
api() {  # api METHOD PATH JSON
  curl -sf --cacert "$RUN/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
       -X "$1" "$SERVER$2" -d "$3" >/dev/null
}
# kelpie's own RBAC is not made here: the tests bind the ClusterRole kelpie ships
# (deploy/base/rbac-cluster.yaml) to user kelpie, so they run with exactly that.
api POST /api/v1/namespaces '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop"}}'
api POST /apis/rbac.authorization.k8s.io/v1/namespaces/shop/rolebindings '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding",
 "metadata":{"name":"kelpie-viewer"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},
 "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"kelpie-viewer"}]}'

if [ "${REALKUBE_KCM:-1}" = 1 ]; then
  start_bg kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$RUN/admin.kubeconfig" --port 0 --secure-port 0 --leader-elect=false \
    --service-account-private-key-file "$RUN/pki/sa.key" --root-ca-file "$RUN/pki/ca.crt" \
    --cluster-signing-cert-file "$RUN/pki/ca.crt" --cluster-signing-key-file "$RUN/pki/ca.key" \
    --use-service-account-credentials=false --controllers '*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-attachdetach,-persistentvolume-binder,-persistentvolume-expander,-ttl' \
    --concurrent-deployment-syncs 2 --concurrent-replicaset-syncs 2
  write_env
  # the "default" ServiceAccount (and its token) in shop is the controller-manager's first sign of life
  for _ in $(seq 1 300); do
    kill -0 "$(cat "$RUN/kube-controller-manager.pid")" 2>/dev/null || fail "kube-controller-manager exited" kube-controller-manager
    if curl -sf --cacert "$RUN/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
         "$SERVER/api/v1/namespaces/shop/serviceaccounts/default" 2>/dev/null | grep -q '"secrets"'; then break; fi
    sleep 0.1
  done
  log "kube-controller-manager running (shop/default service account ready after $(since "$T_START")s)"
fi
write_env
log "control plane up in $(since "$T_START")s (whole script $(since "$T_ALL")s); env: $RUN/env"
echo "$RUN/admin.kubeconfig"
