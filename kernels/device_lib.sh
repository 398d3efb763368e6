# Helpers for the session device scripts (kernels/device_s*.sh): `source kernels/device_lib.sh` from the repository
# root on the device machine.

profile() {  # name, kernel regex, tune_ws run arguments...: ncu --set full of one launch, pages under /tmp/ncu
  local name=$1 regex=$2; shift 2
  local dir=/tmp/ncu; mkdir -p $dir
  timeout 120 ncu --clock-control none --set full --import-source no -k "regex:$regex" --launch-skip 1 \
    --launch-count 1 -f -o $dir/$name python3 -m kernels.tune_ws run "$@" > $dir/$name.log 2>&1
  echo "ncu $name rc=$?"
  ncu -i $dir/$name.ncu-rep --page details --print-details all > $dir/${name}_details.txt 2>&1
  ncu -i $dir/$name.ncu-rep --page raw --csv > $dir/${name}_raw.csv 2>&1
  ncu -i $dir/$name.ncu-rep --page source --csv --print-source sass > $dir/${name}_sass.csv 2>&1
  ls -la $dir | grep $name
}

install_perfci() {  # the carried wheels (.whl: nvtx, plotly) into /tmp/site, perfci itself editable
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
    && export PYTHONPATH=/tmp/site:. && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
}
