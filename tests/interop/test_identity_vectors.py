"""The published identity vectors, recomputed with Python's hashlib from the layout in
docs/identity.md: the document and the Rust implementation agree."""
import json
import os

from conftest import group_of, identity_of, member_of

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "vectors", "identity.json")


def test_every_vector_matches_the_documented_layout():
    doc = json.load(open(VECTORS))
    assert len(doc["vectors"]) >= 6
    for v in doc["vectors"]:
        keys = [(k["alg"], bytes.fromhex(k["key"])) for k in v["keys"]]
        if v["kind"] == "device":
            got = identity_of(keys[0][0], keys[0][1], bytes.fromhex(v["other_hex"]))
        elif v["kind"] == "group":
            got = group_of(keys)
        else:
            got = member_of(keys[0], keys[1:])
        assert got == v["identity"], v["name"]
        label = "-".join(got.upper()[i:i + 4] for i in range(0, 32, 4))
        assert label == v["label"]
        assert got.upper()[-8:] == v["short"]
