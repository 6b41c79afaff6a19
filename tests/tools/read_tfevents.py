#!/usr/bin/env python3
"""Independent reader for TensorBoard event files, used to check tenax's TensorBoardWriter.

Verifies every TFRecord's two masked CRC-32Cs, decodes tensorflow.Event protos by hand (no
TensorFlow, no protobuf package) and prints one JSON line per scalar:
    {"step": 10, "tag": "train/loss", "value": 2.5, "wall_time": 1700000000.0}
Exits 1 on any CRC, framing or protobuf error, naming the record's byte offset.

Needs python3 and crcmod (Debian: python3-crcmod). Non-goals: histograms, images, tensors
(skipped, as any unknown field is).

Usage: read_tfevents.py EVENT_FILE [--file-version]
  --file-version   also print the file_version record as {"file_version": "..."}
"""

import json
import struct
import sys

import crcmod.predefined

_crc32c = crcmod.predefined.mkCrcFun("crc-32c")


class ParseError(Exception):
    pass


def masked_crc(data):
    crc = _crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_varint(buf, pos):
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ParseError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise ParseError("varint longer than 10 bytes")


def fields(buf):
    """Yields (field_number, wire_type, value) for a serialized message; value is an int for
    varints, bytes for fixed64/fixed32/length-delimited fields."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise ParseError("field number 0")
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ParseError("unsupported wire type %d in field %d" % (wire, field))
        if pos > len(buf):
            raise ParseError("field %d runs past the end of its message" % field)
        yield field, wire, value


def expect(wire, want, what):
    if wire != want:
        raise ParseError("%s has wire type %d, expected %d" % (what, wire, want))


def decode_event(buf):
    event = {"wall_time": None, "step": 0, "file_version": None, "values": []}
    for field, wire, value in fields(buf):
        if field == 1:  # double wall_time
            expect(wire, 1, "Event.wall_time")
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif field == 2:  # int64 step
            expect(wire, 0, "Event.step")
            event["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif field == 3:  # string file_version
            expect(wire, 2, "Event.file_version")
            event["file_version"] = value.decode("utf-8")
        elif field == 5:  # Summary summary
            expect(wire, 2, "Event.summary")
            for sfield, swire, svalue in fields(value):
                if sfield != 1:
                    continue
                expect(swire, 2, "Summary.value")
                tag, simple = None, None
                for vfield, vwire, vvalue in fields(svalue):
                    if vfield == 1:
                        expect(vwire, 2, "Summary.Value.tag")
                        tag = vvalue.decode("utf-8")
                    elif vfield == 2:
                        expect(vwire, 5, "Summary.Value.simple_value")
                        simple = struct.unpack("<f", vvalue)[0]
                if tag is not None and simple is not None:
                    event["values"].append((tag, simple))
    return event


def records(data):
    """Yields (offset, payload) for each TFRecord, checking both CRCs."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise ParseError("record at byte %d: truncated header" % pos)
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if header_crc != masked_crc(header):
            raise ParseError("record at byte %d: length CRC mismatch" % pos)
        end = pos + 12 + length + 4
        if end > len(data):
            raise ParseError("record at byte %d: truncated payload" % pos)
        payload = data[pos + 12:pos + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[end - 4:end])
        if payload_crc != masked_crc(payload):
            raise ParseError("record at byte %d: payload CRC mismatch" % pos)
        yield pos, payload
        pos = end


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    show_version = "--file-version" in argv
    with open(args[0], "rb") as f:
        data = f.read()
    try:
        for offset, payload in records(data):
            try:
                event = decode_event(payload)
            except ParseError as e:
                raise ParseError("record at byte %d: %s" % (offset, e))
            if show_version and event["file_version"] is not None:
                print(json.dumps({"file_version": event["file_version"]}))
            for tag, value in event["values"]:
                print(json.dumps({"step": event["step"], "tag": tag, "value": value,
                                  "wall_time": event["wall_time"]}))
    except ParseError as e:
        print("read_tfevents: %s: %s" % (args[0], e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
