module gpu-scheduling.local/bench/loadgen

go 1.22
