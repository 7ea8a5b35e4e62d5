"""A configuration given as a dict, written as the TOML the core parses (README, "Usage"):

    {"host": {"call_timeout_seconds": 60},
     "env": {"vision": {"python": "/usr/bin/python3", "path": ["/opt/packs/vision"]}}}
"""

import json
import math


def to_toml(config):
    """TOML text for `config`: top-level tables of tables ([host], [env.NAME]). Raises
    TypeError, naming the table and key, for what TOML cannot hold."""
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
                lines.extend(_entry("env.%s" % name, k, v) for k, v in env.items())
        else:
            lines.append("[%s]" % _key(section))
            lines.extend(_entry(section, k, v) for k, v in content.items())
    return "\n".join(lines) + "\n"


def _entry(table, key, value):
    try:
        return "%s = %s" % (_key(key), _value(value))
    except TypeError as e:
        raise TypeError("[%s] %s: %s" % (table, key, e)) from None


def _key(key):
    if not isinstance(key, str):
        raise TypeError("configuration keys must be strings, not %r" % (key,))
    return _string(key)


def _string(text):
    """A TOML basic string: JSON's string syntax, with every character that is not a control
    character as it is (JSON's ASCII escapes of others are UTF-16 surrogate pairs, which TOML
    refuses) and DEL escaped, which JSON leaves and TOML refuses."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise TypeError("%r is not valid Unicode (a lone surrogate: a file name that is not "
                        "UTF-8?)" % (text,)) from None
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError("configuration numbers must be finite, not %r" % value)
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join("%s = %s" % (_key(k), _value(v)) for k, v in value.items()) + "}"
    raise TypeError("cannot write %s into a configuration" % type(value).__name__)
