"""The wire room: protobuf messages, msgpack codec, errors, limits and security."""
