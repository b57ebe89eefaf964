"""The engine: runs a plan. `run` walks the trials (results folder, work area, signals,
cleanup), `trial` prepares one through the layers and measures it, `resources` keeps the
filesystems and clusters the layers build, `measure` is the measured window itself."""
