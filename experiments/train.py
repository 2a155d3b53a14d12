"""Train one configuration (or a sweep with -m); each job writes result.json into its output dir."""
from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from pipegnn import RunFailed, run


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    hc = HydraConfig.get()
    record = run(cfg, output_dir=hc.runtime.output_dir, choices=hc.runtime.choices)
    if record["status"] != "completed":
        raise RunFailed(f"{record['status']}: {record['error']} (record in {hc.runtime.output_dir})")
    return record


if __name__ == "__main__":
    main()
