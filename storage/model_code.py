"""MLflow "model from code" script for a fitted NDVM program: MLflow runs it to build the model."""

from mlflow.models import set_model

from storage.pyfunc_model import NDVMProgramModel

set_model(NDVMProgramModel())
