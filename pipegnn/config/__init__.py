"""A run's configuration: its schema (the typed dataclasses behind the YAML groups, registered with
Hydra), the choices its keys take, the typed config of a composed one and how records keep it, how two
configs compare, the checks made before any training, and the hints a misspelt key gets.

- [`schema`][pipegnn.config.schema]: the dataclasses, the groups' schemas, `compose_config`, `register`;
- [`choices`][pipegnn.config.choices]: the enums of the keys that take one of a few values;
- [`typed`][pipegnn.config.typed]: `run_config` (a composed config as one typed object), `group_config`,
  `config_container` (a config as records keep it);
- [`compare`][pipegnn.config.compare]: `comparable_config`, `VOLATILE_KEYS`, `ADDED_KEYS`;
- [`checks`][pipegnn.config.checks]: `check_config` and the general keys' checks;
- [`key_hints`][pipegnn.config.key_hints]: composition errors that name the valid keys.
"""
