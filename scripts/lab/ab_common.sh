# shellcheck shell=bash disable=SC2034  # sourced: the settings are read by the script that sources it
# Shared by pass_ab.sh and switch_ab.sh (sourced, from the repo root): the settings both read, and
# the zoo export of a model where the folder does not have it yet.
#   ZOO (/tmp/fusec-zoo-ab), EXPORT (dynamo), BATCH (16), ROUNDS (2), FUSEC (/tmp/fusec/bin/fusec)
zoo=${ZOO:-/tmp/fusec-zoo-ab}
form=${EXPORT:-dynamo}
batch=${BATCH:-16}
rounds=${ROUNDS:-2}
fusec=${FUSEC:-/tmp/fusec/bin/fusec}
mkdir -p "$zoo"

# ab_export TAG MODEL: $zoo/MODEL.$form.onnx, exported by scripts/export_zoo.py where missing;
# false (having said why under TAG) when the export fails.
ab_export() {
  [ -f "$zoo/$2.$form.onnx" ] && return 0
  python3 scripts/export_zoo.py --models "$2" --exports "$form" --out "$zoo" --skip-reference > "$zoo/export_$2.log" 2>&1 &&
    return 0
  echo "$1: export of $2 failed"
  tail -3 "$zoo/export_$2.log"
  return 1
}
