"""Validates example custom resources against the openAPIV3Schema of the generated CRDs.

usage: validate_custom_resources.py CRD_DIR RESOURCE.yaml...
Checks structure, types, enums, ranges and patterns (x-kubernetes-* extensions and CEL rules
are the API server's job and are not evaluated here).
"""

import sys
from pathlib import Path

import jsonschema
import yaml


def load_schemas(crd_dir):
    schemas = {}
    for path in sorted(Path(crd_dir).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group = crd["spec"]["group"]
        for version in crd["spec"]["versions"]:
            key = (f"{group}/{version['name']}", crd["spec"]["names"]["kind"])
            schemas[key] = version["schema"]["openAPIV3Schema"]
    return schemas


def main():
    schemas = load_schemas(sys.argv[1])
    checked = 0
    for name in sys.argv[2:]:
        for document in yaml.safe_load_all(Path(name).read_text()):
            if not document:
                continue
            key = (document.get("apiVersion"), document.get("kind"))
            if key not in schemas:
                continue
            validator = jsonschema.Draft7Validator(schemas[key])
            errors = sorted(validator.iter_errors(document), key=lambda e: list(e.path))
            for error in errors:
                print(f"{name}: {key[1]} {document['metadata']['name']}: {'/'.join(map(str, error.path))}: {error.message}")
            if errors:
                sys.exit(1)
            checked += 1
    if checked == 0:
        sys.exit("no custom resources found to validate")
    print(f"{checked} custom resources valid against their CRDs")


if __name__ == "__main__":
    main()
