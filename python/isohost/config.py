"""A configuration given as a dict, written as the TOML the core parses (README, "Usage"):

    {"host": {"call_timeout_seconds": 60},
     "env": {"vision": {"python": "/usr/bin/python3", "path": ["/opt/packs/vision"]}}}
"""

import json
import math


def to_toml(config):
    """TOML text for `config`: top-level tables of tables ([host], [env.NAME]). Raises
    TypeError for what TOML cannot hold."""
    if not isinstance(config, dict):
        raise TypeError("a configuration must be a dict, not %s" % type(config).__name__)
    lines = []
    for section, content in config.items():
        if not isinstance(content, dict):
            raise TypeError("[%s] must be a dict" % section)
        if section == "env":
            for name, env in content.items():
                if not isinstance(env, dict):
                    raise TypeError("[env.%s] must be a dict" % name)
                lines.append("[env.%s]" % _key(name))
                lines.extend("%s = %s" % (_key(k), _value(v)) for k, v in env.items())
        else:
            lines.append("[%s]" % _key(section))
            lines.extend("%s = %s" % (_key(k), _value(v)) for k, v in content.items())
    return "\n".join(lines) + "\n"


def _key(key):
    if not isinstance(key, str):
        raise TypeError("configuration keys must be strings, not %r" % (key,))
    return json.dumps(key)  # a TOML basic string is JSON's string syntax


def _value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError("configuration numbers must be finite")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join("%s = %s" % (_key(k), _value(v)) for k, v in value.items()) + "}"
    raise TypeError("cannot write %s into a configuration" % type(value).__name__)
