"""Studies and plans across a Slurm cluster: one workload, one Slurm job."""
