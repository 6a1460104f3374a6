#!/usr/bin/env bash
# Resolve the jars of a single-node Apache Kafka (KRaft) broker into a local cache, once.
#
# Why: tests and the dev command need a real Kafka without Docker or a downloaded tarball; Maven can
# fetch the broker's runtime jars from deploy/kafka/pom.xml. Re-running is cheap: a marker file in the
# libs dir says the copy finished, so a half-copied dir (interrupted run) is never trusted.
#
# Env:  CLAIMSTREAM_KAFKA_POM      the pom (default: deploy/kafka/pom.xml; the dev kit passes its copy)
#       CLAIMSTREAM_KAFKA_VERSION  Kafka version (default: the kafka.version property in the pom)
#       CLAIMSTREAM_KAFKA_HOME     cache root (default: $HOME/.cache/claimstream/kafka-<version>)
# Prints the libs dir (the only stdout line) so callers can use `java -cp "<libs>/*"`.
set -euo pipefail

die() { echo "kafka-assemble: $*" >&2; exit 1; }

pom="${CLAIMSTREAM_KAFKA_POM:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/deploy/kafka/pom.xml}"
[[ -f "$pom" ]] || die "missing $pom"

default_version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom" | head -n1)"
version="${CLAIMSTREAM_KAFKA_VERSION:-$default_version}"
[[ -n "$version" ]] || die "cannot read kafka.version from $pom"

home="${CLAIMSTREAM_KAFKA_HOME:-$HOME/.cache/claimstream/kafka-$version}"
libs="$home/libs"
marker="$libs/.assembled-$version"

if [[ -f "$marker" ]]; then
  echo "$libs"
  exit 0
fi

command -v mvn >/dev/null 2>&1 || die "mvn not found on PATH (Maven is needed once to fetch the Kafka jars)"
command -v java >/dev/null 2>&1 || die "java not found on PATH (Java 17+ runs the broker)"

mkdir -p "$home"
# Copy into a private dir then rename, so concurrent runs never see a partial libs dir.
tmp="$(mktemp -d "$home/libs.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "kafka-assemble: resolving Apache Kafka $version jars into $libs (first run only)" >&2
mvn_log="$home/mvn.log"
if ! mvn -q -B -Dstyle.color=never -f "$pom" -Dkafka.version="$version" -DincludeScope=runtime \
     dependency:copy-dependencies -DoutputDirectory="$tmp" >"$mvn_log" 2>&1; then
  grep -a '\[ERROR\]' "$mvn_log" | head -n 5 >&2 || true
  die "mvn could not resolve org.apache.kafka:kafka_2.13:$version (network? version?); see $mvn_log"
fi
ls "$tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || die "mvn finished but no kafka_2.13 jar in $tmp"
touch "$tmp/.assembled-$version"

rm -rf "$libs.old"
if [[ -d "$libs" ]]; then
  if [[ -f "$marker" ]]; then echo "$libs"; exit 0; fi  # another run won the race
  mv "$libs" "$libs.old"                                # leftover of an interrupted run
fi
mv -T "$tmp" "$libs" 2>/dev/null || [[ -f "$marker" ]] || die "could not move jars into $libs"
rm -rf "$libs.old"
echo "$libs"
