#!/usr/bin/env bash
# logging.tensorboard: a 2-stage run writes output_dir/tb/events.out.tfevents.*;
# an independent reader (Python: the record framing and masked CRC32C written
# out here, the Event protobuf through python3-protobuf and protoc) reads back
# every scalar with correct CRCs, and they equal metrics.jsonl's values.
source "$(dirname "$0")/lib.sh"
[ -x "$PY" ] && "$PY" -c "import google.protobuf" 2>/dev/null || fail "protobuf for $PY is needed (scripts/setup.sh installs it)"
"$SLUICE" train "$ROOT/configs/quickstart.yaml" --set training.steps=6 --set logging.interval=3 "${SMALL[@]}" \
  --set pipeline.stages=2 --set pipeline.profile="$(shared_profile small)" \
  --set job.output_dir="$TMP/run" --set logging.tensorboard=true >"$TMP/run.log" 2>&1 || { cat "$TMP/run.log"; fail "training"; }
files=("$TMP"/run/tb/events.out.tfevents.*)
[ ${#files[@]} -eq 1 ] && [ -f "${files[0]}" ] || fail "expected one events file, got ${files[*]}"
protoc --proto_path="$ROOT/tests/cli" --python_out="$TMP" "$ROOT/tests/cli/tb_event.proto" || fail "protoc"
PYTHONPATH="$TMP" "$PY" - "${files[0]}" "$TMP/run/metrics.jsonl" <<'PY' || fail "the events file"
import json, struct, sys
import tb_event_pb2

def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value

def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

data = open(sys.argv[1], "rb").read()
pos, events = 0, []
while pos < len(data):
    header = data[pos:pos + 8]
    (length,) = struct.unpack("<Q", header)
    (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
    assert length_crc == masked(crc32c(header)), f"bad length CRC at byte {pos}"
    body = data[pos + 12:pos + 12 + length]
    (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
    assert body_crc == masked(crc32c(body)), f"bad data CRC at byte {pos}"
    event = tb_event_pb2.Event()
    event.ParseFromString(body)
    events.append(event)
    pos += 16 + length
assert pos == len(data), "trailing bytes"
assert events[0].file_version == "brain.Event:2", events[0]
scalars = {}
for e in events[1:]:
    for v in e.summary.value:
        scalars[(v.tag, e.step)] = v.simple_value
metrics = [json.loads(line) for line in open(sys.argv[2])]
assert len(metrics) == 6
expected = 0
for m in metrics:
    step = m["step"]
    for key in ("loss", "lr", "step_time_s", "samples_per_s", "tokens_per_s"):
        got = scalars[(key, step)]
        # float32 in the event, and metrics.jsonl rounds rates to 0.1 / 0.001 and times to 1e-6
        printed = {"tokens_per_s": 0.05, "samples_per_s": 0.0005, "step_time_s": 5e-7}.get(key, 0)
        assert abs(got - m[key]) <= 1e-6 * max(1.0, abs(m[key])) + printed, (key, step, got, m[key])
        expected += 1
    for i, peak in enumerate(m["peak_bytes"]):
        got = scalars[(f"peak_bytes/stage_{i}", step)]
        assert abs(got - peak) <= 1e-6 * peak, (i, step, got, peak)
        expected += 1
assert len(scalars) == expected, (len(scalars), expected)
print(f"ok: {len(events)} records with correct CRCs; {len(scalars)} scalars over {len(metrics)} steps equal metrics.jsonl")
PY
