# the 4.x config form: flags from grpo.yaml, the command line overrides them
swift rlhf grpo.yaml --num_generations 16 --learning_rate 5e-7 2>&1 | tee run.log
