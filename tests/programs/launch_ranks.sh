#!/bin/sh
# A minimal launcher like torchrun: starts N copies of PROGRAM, one per rank, and waits.
#   launch_ranks.sh N PROGRAM
n=$1
prog=$2
i=0
while [ "$i" -lt "$n" ]; do
  RANK=$i LOCAL_RANK=$i WORLD_SIZE=$n "$prog" &
  i=$((i + 1))
done
wait
