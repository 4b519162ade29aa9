#!/bin/bash
# The GPU training of the installed dcn, dcn_plus, deep_lstm_reader and qanet_paper (docs/models.md):
# the four side by side on one GPU, each to BUDGET_MIN minutes of training in all (--resume from the
# last call's checkpoint), each killed after TRAIN_WALL_S (a checkpoint on SIGTERM), then evaluated on
# all of dev and exported. Run by the device tool from the repository root, with .gpu/ carried:
# .gpu/data (the two SQuAD v1.1 files) and .gpu/glove (benchmarks/gpu/glove_subset.py make .gpu/glove).
#   bash benchmarks/gpu/train_installed.sh 7 440; ... 15 475; ... 24 525     (2026-11-25, one H100)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src RCKIT_CACHE=/tmp/rckit-cache OMP_NUM_THREADS=3
B=$1; W=$2; shift 2; MODELS=${*:-dcn dcn_plus deep_lstm_reader qanet}
python3 benchmarks/gpu/glove_subset.py build .gpu/glove /tmp/site
nvidia-smi -L; python3 -c "import torch;print(torch.__version__, torch.cuda.get_device_name())"
mkdir -p runs/gpu
[ -e /tmp/rckit-cache/squad ] || python3 -m rckit prepare squad --data-dir .gpu/data 2>&1 | tail -2
declare -A A
A[dcn]="--preset paper"
A[dcn_plus]="--preset paper --set model.mixed_objective=false --set model.n_experts=4 --set model.pool=8"
A[deep_lstm_reader]="--preset squad-cpu --set model.hidden=256 --set train.batch_size=64"
A[qanet]="--preset paper"
for m in $MODELS; do
  r=runs/gpu/$m
  if [ -e $r/last.pt ]; then a="--resume"; else a="${A[$m]}"; fi
  echo "$m: $a"
  timeout -s TERM $W python3 -m rckit train $m --data-dir .gpu/data --out $r $a --time-budget ${B}m \
    --checkpoint-every 200 --no-progress >> runs/gpu/$m.train.log 2>&1 &
done
wait
for m in $MODELS; do
  (python3 -m rckit evaluate runs/gpu/$m --out runs/gpu/$m/dev-predictions.json > runs/gpu/$m.eval.log 2>&1
   python3 -m rckit export runs/gpu/$m --out /tmp/$m.safetensors > runs/gpu/$m.export.log 2>&1
   split -b 15m -d /tmp/$m.safetensors $OUT/$m.safetensors.part) &  # files come back 16 MiB at most
done
wait
for f in runs/gpu/*.log; do echo "== $f"; tail -n 4 $f; done
tar czf $OUT/logs.tgz runs/gpu/*.log runs/gpu/*/config.json runs/gpu/*/metrics.jsonl runs/gpu/*/*.png 2>/dev/null
