/* rnn_cudnn_api.h -- gpucmp._core.rnn_cudnn_weight_map (rnn_cudnn_api.c): the index map
 * between Keras' recurrent weights and cuDNN's RNN weight space, for tests.
 *
 * Include after Python.h. PyInit__core calls gpucmp_add_rnn_cudnn_api(m) once; 0, or -1
 * with a Python exception set. */
#ifndef GPUCMP_PYTHON_RNN_CUDNN_API_H
#define GPUCMP_PYTHON_RNN_CUDNN_API_H

int gpucmp_add_rnn_cudnn_api(PyObject *module);

#endif /* GPUCMP_PYTHON_RNN_CUDNN_API_H */
