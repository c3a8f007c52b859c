"""Self-checks of the test helpers' framing codecs (so a framing failure elsewhere points at the
daemon, not at the helpers): byte layouts written out by hand from the protocol description."""
import json
import struct

from helpers import wire


def test_v1_layout_by_hand():
    msg = {"channel": "shell", "header": {"a": 1}, "parent_header": {}, "metadata": {}, "content": {"c": 2},
           "buffers": [b"XY"]}
    data = wire.v1_encode(msg)
    parts = [b"shell", b'{"a": 1}', b"{}", b"{}", b'{"c": 2}', b"XY"]
    count = 1 + len(parts)           # offsets: start of each part + the end
    assert count == 2 + 5            # = 2 + number of parts after the channel
    offsets, pos = [], 8 * (count + 1)
    for p in parts:
        offsets.append(pos)
        pos += len(p)
    offsets.append(pos)
    expected = struct.pack("<Q", count) + b"".join(struct.pack("<Q", o) for o in offsets) + b"".join(parts)
    assert data == expected
    back = wire.v1_decode(data)
    assert back["channel"] == "shell" and back["header"] == {"a": 1} and back["content"] == {"c": 2}
    assert back["buffers"] == [b"XY"]


def test_legacy_binary_layout_by_hand():
    msg = {"channel": "shell", "header": {"msg_id": "m"}, "parent_header": {}, "metadata": {}, "content": {},
           "buffers": [b"abc", b"de"]}
    data, is_binary = wire.legacy_encode(msg)
    assert is_binary
    (n,) = struct.unpack_from(">I", data, 0)
    assert n == 3
    offsets = struct.unpack_from(">3I", data, 4)
    assert offsets[0] == 16
    body = json.loads(data[offsets[0]:offsets[1]])
    assert body["header"] == {"msg_id": "m"} and "buffers" not in body
    assert data[offsets[1]:offsets[2]] == b"abc" and data[offsets[2]:] == b"de"
    back = wire.legacy_decode(data, True)
    assert back["buffers"] == [b"abc", b"de"] and back["header"] == {"msg_id": "m"}


def test_legacy_text():
    msg = wire.new_message("kernel_info_request", session="s")
    payload, is_binary = wire.legacy_encode(msg)
    assert not is_binary
    assert json.loads(payload)["header"]["msg_type"] == "kernel_info_request"
    assert json.loads(payload)["buffers"] == []
